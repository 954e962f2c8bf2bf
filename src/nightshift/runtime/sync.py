"""Synchronous stepping: one agent through the provider's normal API, with the batch step logic.

For building and debugging agents before running them in batch: the same requests, tools, rules
and persistence as a batch step, one model call at a time, until the agent stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.messages import Message, UserInput
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.providers.base import Usage
from nightshift.providers.clients import ProviderSet
from nightshift.runtime.context import StepInputs, build_requests, heartbeat_message, user_message
from nightshift.runtime.persist import write_turns
from nightshift.runtime.search import StoreSearch
from nightshift.runtime.step import Turn, TurnReason, first_state, take_turns
from nightshift.store import agents as agent_store
from nightshift.store import items as item_store
from nightshift.tools.sandbox import Sandbox

# How long a synchronous step holds its agent at most (a crashed server's hold expires then).
SYNC_HOLD = timedelta(minutes=15)


@dataclass(slots=True, kw_only=True)
class SyncResult:
    """Everything the agent's run wrote, in order, with why it stopped and what it used."""

    messages: list[Message] = field(default_factory=list)
    stop: TurnReason = TurnReason.FINAL_TEXT
    usage: Usage = field(default_factory=Usage)
    steps: int = 0


async def step_agent(
    engine: AsyncEngine,
    providers: ProviderSet,
    sandbox: Sandbox,
    org_id: str,
    agent_id: str,
    texts: Sequence[str | UserInput],
    *,
    max_steps: int,
) -> SyncResult:
    """Send ``texts`` to the agent and step it until it stops or reaches ``max_steps``.

    Each of ``texts`` is one user message: its text, or a ``UserInput`` with images too.

    Raises:
        InvalidInput: no message text.
        NotFound: no such agent.
        Conflict: the agent is in an open step of a batch run, or in another synchronous step.
        ProviderError: the provider failed (what was written before stays written).
    """
    turns = [t if isinstance(t, UserInput) else UserInput(text=t) for t in texts]
    if not any(t.text.strip() or t.images for t in turns):
        raise InvalidInput("give at least one message with text", field="messages")
    out = SyncResult()
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        found = await agent_store.load_agents(conn, org_id, [agent_id])
        if agent_id not in found:
            raise NotFound(f"agent {agent_id} not found")
        agent = found[agent_id]
        # Hold the agent so that no batch run (or other synchronous step) writes its window meanwhile.
        # The hold is taken first (it locks the agent's row, as creating a run does), then the
        # batch steps are checked, so a run created at the same moment is seen either way.
        if not await agent_store.hold_for_sync_step(conn, agent_id, now, now + SYNC_HOLD):
            raise Conflict(f"agent {agent_id} is already being stepped synchronously; wait for that to finish")
        if await item_store.agents_in_open_steps(conn, [agent_id]):
            raise Conflict(f"agent {agent_id} is in an open step of a batch run; wait for it or cancel the run")
        inputs = StepInputs()
        messages = [user_message(agent, t.text, now, images=t.images) for t in turns if t.text.strip() or t.images]
        agent = inputs.add(agent, messages)
        await inputs.write(conn, now)
    try:
        out.messages.extend(messages)
        state = first_state(agent, max_steps)
        provider = providers.get(agent.llm_config.provider)
        while True:
            async with engine.connect() as conn:
                requests, problems = await build_requests(conn, [agent], {agent.id: state})
            if agent.id in problems:
                raise InvalidInput(f"agent {agent.id} cannot be stepped: {problems[agent.id]}")
            request = requests[agent.id]
            response = await provider.complete(request)
            out.steps += 1
            out.usage += response.usage
            async with engine.connect() as conn:
                (result,) = await take_turns(
                    [Turn(agent=agent, state=state, response=response)],
                    search=StoreSearch(conn),
                    sandbox=sandbox,
                    now=datetime.now(UTC),
                )
            now = datetime.now(UTC)
            async with engine.begin() as conn:
                fresh = await agent_store.load_agents(conn, org_id, [agent.id])
                agent = (await write_turns(conn, fresh, [result], now))[agent.id]
                out.messages.extend(result.messages)
                if not result.continues:
                    out.stop = result.reason
                    return out
                inputs = StepInputs()
                heartbeat = heartbeat_message(agent, now)
                agent = inputs.add(agent, [heartbeat])
                await inputs.write(conn, now)
                out.messages.append(heartbeat)
            state = result.state
    finally:
        async with engine.begin() as conn:
            await agent_store.release_sync_step(conn, agent_id)
