"""What the model sees: input messages, and the provider requests built from agents' in-context windows."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agents import Agent
from nightshift.domain.batches import StepState
from nightshift.domain.messages import Image, Message, Role
from nightshift.domain.tools import Tool, schema_problem
from nightshift.ids import new_id
from nightshift.providers.base import ModelRequest
from nightshift.runtime.memory import compile_system_message, memory_changed
from nightshift.store import agents as agent_store
from nightshift.store import messages as message_store
from nightshift.store import passages as passage_store

HEARTBEAT_REASON = "You asked for another turn (request_heartbeat=true); continue where you left off."


def user_message(
    agent: Agent,
    text: str,
    now: datetime,
    *,
    batch_item_id: str | None = None,
    event: str | None = None,
    images: Sequence[Image] = (),
) -> Message:
    """A message from the user to ``agent`` (or, with ``event``, from the system in the user's turn)."""
    return Message(
        id=new_id("message"),
        organization_id=agent.organization_id,
        agent_id=agent.id,
        role=Role.USER,
        text=text,
        created_at=now,
        batch_item_id=batch_item_id,
        extra={"event": event} if event else {},
        images=tuple(images),
    )


def heartbeat_message(agent: Agent, now: datetime, *, batch_item_id: str | None = None) -> Message:
    """The automatic user turn that gives an agent the next step it asked for."""
    body = {"type": "heartbeat", "reason": HEARTBEAT_REASON, "time": now.isoformat()}
    return user_message(agent, json.dumps(body), now, batch_item_id=batch_item_id, event="heartbeat")


class StepInputs:
    """Input messages and system-message refreshes for the agents of one step, written in bulk."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.agents: list[Agent] = []

    def add(self, agent: Agent, inputs: Sequence[Message]) -> Agent:
        """Append ``inputs`` to ``agent``'s in-context window; returns the updated agent."""
        updated = replace(agent, message_ids=(*agent.message_ids, *(m.id for m in inputs)))
        self.messages.extend(inputs)
        self.agents.append(updated)
        return updated

    async def write(self, conn: AsyncConnection, now: datetime) -> None:
        """Persist the inputs and windows, and rebuild the system messages whose memory changed."""
        await refresh_system_messages(conn, self.agents, now)
        await message_store.insert_messages(conn, self.messages)
        await agent_store.set_message_ids(conn, [(a.id, a.message_ids) for a in self.agents], now)


async def refresh_system_messages(conn: AsyncConnection, agents: Sequence[Agent], now: datetime) -> None:
    """Rewrite, in bulk, the system message of each agent whose prompt or core memory changed."""
    system_ids = [a.message_ids[0] for a in agents if a.message_ids]
    current = await message_store.get_messages(conn, system_ids)
    stale = [
        a
        for a in agents
        if a.message_ids
        and a.message_ids[0] in current
        and memory_changed(current[a.message_ids[0]].text, a.system, a.blocks)
    ]
    if not stale:
        return
    ids = [a.id for a in stale]
    recall = await message_store.count_messages(conn, ids)
    archival = await passage_store.count_passages(conn, ids)
    await message_store.update_system_texts(
        conn,
        [
            (
                a.message_ids[0],
                compile_system_message(
                    a.system, a.blocks, now=now, recall_count=recall[a.id], archival_count=archival[a.id]
                ),
            )
            for a in stale
        ],
    )


async def build_requests(
    conn: AsyncConnection, agents: Sequence[Agent], states: Mapping[str, StepState]
) -> tuple[dict[str, ModelRequest], dict[str, str]]:
    """One request per agent from its in-context window, with the tools its step allows.

    Returns the requests and, for each agent whose request cannot be built (no system message
    in its window, a tool with an unusable schema), why; those agents have no request. The
    messages of all agents are loaded in one statement.
    """
    ids = [message_id for agent in agents for message_id in agent.message_ids]
    stored = await message_store.get_messages(conn, ids)
    requests: dict[str, ModelRequest] = {}
    problems: dict[str, str] = {}
    checked: dict[str, str | None] = {}  # the agents share their tools: each is checked once
    for agent in agents:
        window = [stored[i] for i in agent.message_ids if i in stored]
        if not window or window[0].role is not Role.SYSTEM:
            problems[agent.id] = "the agent has no system message in its context window"
            continue
        allowed = set(states[agent.id].allowed_tools)
        offered = [t for t in agent.tools if not allowed or t.name in allowed]
        broken = next(((t, p) for t in offered if (p := _problem(t, checked)) is not None), None)
        if broken is not None:
            tool, problem = broken
            problems[agent.id] = f"its tool {tool.name!r} cannot be offered to the model: {problem}"
            continue
        requests[agent.id] = ModelRequest.from_config(
            agent.llm_config, system=window[0].text, messages=window[1:], tools=[t.json_schema for t in offered]
        )
    return requests, problems


def _problem(tool: Tool, checked: dict[str, str | None]) -> str | None:
    if tool.id not in checked:
        checked[tool.id] = schema_problem(tool.json_schema)
    return checked[tool.id]
