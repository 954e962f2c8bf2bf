"""The client's answers to approval requests: the turn that applies one, and applying answers
outside a synchronous send (a batch run's requests that answer their agents' approval requests:
checked and held, run, then written in the transaction that queues the run).

The rules (which calls wait, what a verdict does) are ``domain/approvals.py``'s; the calls run
in ``runtime/step.py`` like any turn's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.domain.agents import Agent
from nightshift.domain.approvals import (
    Answer,
    ClientTool,
    awaiting_conflict,
    checked_verdicts,
    not_awaiting_conflict,
    pending_request,
    waiting_calls,
)
from nightshift.domain.batches import StepState
from nightshift.errors import Conflict, NotFound
from nightshift.providers.base import ModelResponse
from nightshift.runtime.persist import write_turns
from nightshift.runtime.search import StoreSearch
from nightshift.runtime.step import Turn, TurnResult, take_turns
from nightshift.store import agents as agent_store
from nightshift.store import items as item_store
from nightshift.store import messages as message_store
from nightshift.tools.sandbox import Sandbox

# How long applying an answer holds its agent at most (a crashed server's hold expires then).
ANSWER_HOLD = timedelta(minutes=15)


async def answer_turn(
    conn: AsyncConnection, agent: Agent, answer: Answer | None, max_steps: int, client_tools: Sequence[ClientTool]
) -> Turn | None:
    """The turn that applies ``answer`` to the approval request the agent awaits (None without an answer).

    Raises:
        Conflict: the agent awaits an answer and got none, or got one and awaits none.
        InvalidInput: the answer does not fit the pending calls.
    """
    tail = agent.message_ids[-1:] if agent.message_ids else []
    request = pending_request(next(iter((await message_store.get_messages(conn, tail)).values()), None))
    if answer is None:
        if request is not None:
            raise awaiting_conflict(agent.id, request)
        return None
    if request is None:
        raise not_awaiting_conflict(agent.id)

    def on_server(name: str) -> bool:
        return agent.tool(name) is not None

    waiting = waiting_calls(request.tool_calls, agent.tool_rules, lambda name: not on_server(name))
    verdicts = checked_verdicts(answer, request, waiting, on_server)
    # The parked turn again, as the model made it. Its calls were not checked against the rules
    # then and are not now (the client decided), as in Letta; a call that ran asks for the next step.
    response = ModelResponse(
        tool_calls=request.tool_calls, reasoning=request.reasoning, text=request.text or None, request_heartbeat=True
    )
    state = StepState(max_steps=max_steps, client_tools=tuple(client_tools))
    return Turn(agent=agent, state=state, response=response, message_id=request.id, verdicts=verdicts)


@dataclass(slots=True, kw_only=True)
class HeldAnswers:
    """Answers checked against their agents' pending calls, the agents held meanwhile; then their turns' results.

    ``prepare_answers`` makes it (nothing is written but the holds), ``run_answers`` runs the
    approved calls (no transaction open), ``write_answers`` writes the results in the caller's
    transaction (the one that queues the run, so that a refused run writes none of them), and
    ``release`` lets the agents go whatever happened.
    """

    org_id: str
    turns: list[Turn] = field(default_factory=list)
    results: list[TurnResult] = field(default_factory=list)


async def prepare_answers(
    engine: AsyncEngine, org_id: str, answers: Mapping[str, Answer], *, now: datetime, max_steps: int
) -> HeldAnswers:
    """Check each agent's answer (by agent id) against the calls it awaits, holding the agents.

    Raises (with every agent let go again):
        NotFound: an agent that does not exist.
        Conflict: an agent stepping elsewhere, or awaiting no answer.
        InvalidInput: an answer that does not fit its agent's pending calls.
    """
    held = HeldAnswers(org_id=org_id)
    try:
        for agent_id, answer in answers.items():
            async with engine.begin() as conn:
                found = await agent_store.load_agents(conn, org_id, [agent_id])
                if agent_id not in found:
                    raise NotFound(f"agent {agent_id} not found")
                if not await agent_store.hold_for_sync_step(conn, agent_id, now, now + ANSWER_HOLD):
                    raise Conflict(f"agent {agent_id} is being stepped synchronously; wait for that to finish")
                if await item_store.agents_in_open_steps(conn, [agent_id]):
                    raise Conflict(f"agent {agent_id} is in an open step of a batch run; wait for it or cancel the run")
                turn = await answer_turn(conn, found[agent_id], answer, max_steps, ())
                assert turn is not None
            held.turns.append(turn)
    except BaseException:
        await release(engine, held)
        raise
    return held


async def run_answers(engine: AsyncEngine, sandbox: Sandbox, held: HeldAnswers, *, now: datetime) -> None:
    """Run the answers' approved calls (and the calls that did not wait), every agent's together."""
    async with engine.connect() as conn:
        held.results = await take_turns(held.turns, search=StoreSearch(conn), sandbox=sandbox, now=now)


async def write_answers(conn: AsyncConnection, held: HeldAnswers, *, now: datetime) -> None:
    """Write the answers' results to their agents' windows and let the agents go, in ``conn``'s transaction."""
    ids = [t.agent.id for t in held.turns]
    fresh = await agent_store.load_agents(conn, held.org_id, ids)
    await write_turns(conn, fresh, held.results, now)
    for agent_id in ids:
        await agent_store.release_sync_step(conn, agent_id, None)


async def release(engine: AsyncEngine, held: HeldAnswers) -> None:
    """Let the agents go (a no-op for those ``write_answers`` let go already)."""
    if held.turns:
        async with engine.begin() as conn:
            for turn in held.turns:
                await agent_store.release_sync_step(conn, turn.agent.id, None)
