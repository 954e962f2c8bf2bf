"""Writing a step's results: messages, memory edits, passages, context windows and summaries, in bulk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agents import Agent
from nightshift.domain.blocks import Block
from nightshift.domain.messages import Message
from nightshift.runtime.step import TurnReason, TurnResult
from nightshift.runtime.window import Summary, added_tokens, summarized
from nightshift.store import agents as agent_store
from nightshift.store import blocks as block_store
from nightshift.store import messages as message_store
from nightshift.store import passages as passage_store


async def write_turns(
    conn: AsyncConnection, agents: Mapping[str, Agent], results: Sequence[TurnResult], now: datetime
) -> dict[str, Agent]:
    """Persist every turn's messages, changed blocks and passages; append the messages to the windows.

    An agent with ``message_buffer_autoclear`` that stops keeps only its system message in context
    (its messages stay in recall memory). Returns the agents as they are now, blocks included.
    Turns of agents that are not in ``agents`` (deleted meanwhile) are left out.
    """
    results = [r for r in results if r.agent_id in agents]
    await message_store.insert_messages(conn, [m for r in results for m in r.messages])
    changed: dict[str, Block] = {b.id: b for r in results for b in r.changed_blocks}
    await block_store.update_blocks(conn, list(changed.values()))
    await passage_store.insert_passages(conn, [p for r in results for p in r.passages])
    updated: dict[str, Agent] = {}
    for result in results:
        agent = agents[result.agent_id]
        window = (*agent.message_ids, *(m.id for m in result.messages))
        # The provider counted the request exactly: only the turn's messages are estimated.
        counted = replace(agent, context_tokens=result.request_tokens) if result.request_tokens else agent
        tokens = added_tokens(counted, result.messages)
        # An agent awaiting an answer keeps the calls it waits on in its window.
        awaits = result.reason is TurnReason.REQUIRES_APPROVAL
        if not result.continues and agent.message_buffer_autoclear and not awaits:
            window, tokens = window[:1], None  # counted again when next needed
        # The same tuple when none of its blocks changed: what was compiled from it still holds.
        blocks = agent.blocks
        if changed and any(b.id in changed for b in blocks):
            blocks = tuple(changed.get(b.id, b) for b in blocks)
        updated[agent.id] = replace(agent, message_ids=window, context_tokens=tokens, blocks=blocks, updated_at=now)
    await agent_store.set_windows(conn, list(updated.values()), now)
    return updated


async def write_summaries(
    conn: AsyncConnection, agents: Mapping[str, Agent], summaries: Sequence[Summary], now: datetime
) -> dict[str, Agent]:
    """Put each summary in its agent's window in place of the messages it stands for; returns
    the agents as they are now. Agents not in ``agents`` (deleted meanwhile) are left out."""
    updated: dict[str, Agent] = {}
    messages: list[Message] = []
    for summary in summaries:
        if summary.agent_id in agents:
            updated[summary.agent_id], message = summarized(agents[summary.agent_id], summary, now)
            messages.append(message)
    await message_store.insert_messages(conn, messages)
    await agent_store.set_windows(conn, list(updated.values()), now)
    return updated
