"""Synchronous stepping: one agent through the provider's normal API, with the batch step logic.

For building and debugging agents before running them in batch: the same requests, tools, rules
and persistence as a batch step, one model call at a time, until the agent stops. A
``SyncListener`` hears the run as it goes (the streaming API): the messages of each step once they
are written and, when it asks for tokens, the model's answer piece by piece as it streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.clock import Clock
from nightshift.domain.agent_runs import AgentRunStep
from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.approvals import Answer, ClientTool
from nightshift.domain.batches import StepState
from nightshift.domain.caching import CachePolicy
from nightshift.domain.context_window import SummaryPlan
from nightshift.domain.messages import Message, UserInput
from nightshift.domain.usage import Usage
from nightshift.errors import Conflict, InvalidInput, NotFound, ProviderError, ProviderErrorKind
from nightshift.ids import new_id
from nightshift.providers.base import (
    ChatProvider,
    ModelRequest,
    ModelResponse,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
)
from nightshift.providers.clients import ProviderSet
from nightshift.runtime.answers import answer_turn
from nightshift.runtime.caching import CacheTiming
from nightshift.runtime.context import StepInputs, build_requests, heartbeat_message, user_message
from nightshift.runtime.persist import write_summaries, write_turns
from nightshift.runtime.search import StoreSearch
from nightshift.runtime.step import Turn, TurnReason, Why, first_state, take_turns
from nightshift.runtime.window import Summary
from nightshift.store import agent_runs as agent_run_store
from nightshift.store import agents as agent_store
from nightshift.store import items as item_store
from nightshift.tools.sandbox import Sandbox

# How long a synchronous step holds its agent at most (a crashed server's hold expires then).
SYNC_HOLD = timedelta(minutes=15)


class SyncListener(Protocol):
    """Hears a synchronous run as it goes. A listener that raises stops the run (as a provider error would)."""

    @property
    def tokens(self) -> bool:
        """Whether the model's answers stream through ``delta`` (the provider's streaming API)."""
        ...

    async def messages(self, messages: Sequence[Message]) -> None:
        """Messages the run has just written (committed), in order: the input, then each step's."""
        ...

    async def delta(self, message_id: str, delta: TextDelta | ToolCallDelta) -> None:
        """A piece of the answer that becomes the assistant message ``message_id`` once the step is written."""
        ...


@dataclass(slots=True, kw_only=True)
class SyncResult:
    """Everything the agent's run wrote, in order, with why it stopped and what it used.

    ``cancelled``: the run was cancelled (or its agent deleted): before it started, between two
    steps, or while a step waited for its answer or ran its tools (that step is not written).
    """

    messages: list[Message] = field(default_factory=list)
    stop: Why = TurnReason.FINAL_TEXT
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    cancelled: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Overrides:
    """What one send asks of its model calls instead of the agent's own settings; the agent is unchanged.

    ``model`` (``provider/model-name``, checked where it entered) takes each step's call, with the
    agent's limits and temperature, and a context window no larger than ``model_window`` (that
    model's, when the price data knows it): a window the agent filled for a larger model is then
    refused as too big rather than cut short by the provider. ``system`` replaces the agent's
    system message (its memory included) in each step's call; the stored one stays. Summarizing
    calls keep the agent's own settings: they rewrite its window, which outlives the send.
    """

    model: str | None = None
    model_window: int | None = None
    system: str | None = None

    def config(self, config: LLMConfig) -> LLMConfig:
        """``config`` on the model asked for, if any."""
        if self.model is None:
            return config
        provider, _, name = self.model.partition("/")
        window = min(config.context_window, self.model_window or config.context_window)
        return replace(config, provider=provider, model=name, context_window=window)

    def request(self, request: ModelRequest) -> ModelRequest:
        """A step's request with the system prompt asked for, if any."""
        return request if self.system is None else replace(request, system=self.system)


NO_OVERRIDES = Overrides()


def _tie(message: Message, run_id: str, step_id: str) -> Message:
    return replace(message, run_id=run_id, step_id=step_id)


async def step_agent(
    engine: AsyncEngine,
    providers: ProviderSet,
    sandbox: Sandbox,
    org_id: str,
    agent_id: str,
    inputs: Sequence[UserInput],
    *,
    max_steps: int,
    run_id: str,
    clock: Clock,
    listener: SyncListener | None = None,
    summary_model: str | None = None,
    cache_policy: CachePolicy = CachePolicy.AUTO,
    overrides: Overrides = NO_OVERRIDES,
    answer: Answer | None = None,
    client_tools: Sequence[ClientTool] = (),
) -> SyncResult:
    """Send ``inputs`` to the agent and step it until it stops, reaches ``max_steps`` or is cancelled.

    The agent run ``run_id`` (created, not started) is started here; each model call is recorded
    on it as a step, and every message written carries the run's id and its step's id. Ending
    the run is the caller's business. A step is written only if the run is still running then
    (checked on the run's row, in the write's transaction): a cancel, or the agent's deletion,
    ends it at once for the database, and the step in flight ends without writing when it gets
    there.

    ``listener``, if given, hears the messages as they are written and the streamed answers.
    Before a request that would overflow the agent's context window, its oldest messages are
    summarized (by ``summary_model``, or the agent's own model) through the normal API. The
    calls' prompt-cache marks follow ``cache_policy``. ``overrides`` change the step's calls for
    this send only (see :class:`Overrides`).

    ``answer`` is the client's answer to the approval request the agent awaits (then ``inputs``
    is empty): its calls run, are denied or take the client's results before the first model
    call. ``client_tools`` are offered to the model for the whole run; a call of one (or of a
    tool needing approval) stops the agent with an approval request (``domain/approvals.py``).

    Raises:
        InvalidInput: no message text; an answer that does not fit the pending calls.
        NotFound: no such agent.
        Conflict: the agent is in an open step of a batch run, or in another synchronous step;
            it awaits an answer and got a message, or got an answer and awaits none.
        ProviderError: the provider failed (what was written before stays written).
    """
    if answer is None and not any(i.text.strip() or i.images for i in inputs):
        raise InvalidInput("give at least one message with text", field="messages")
    if answer is not None and inputs:
        raise InvalidInput("send an approval alone, without other messages in the same request", field="messages")
    out = SyncResult()
    now = clock.now()
    step_id = new_id("step")
    async with engine.begin() as conn:
        found = await agent_store.load_agents(conn, org_id, [agent_id])
        if agent_id not in found:
            raise NotFound(f"agent {agent_id} not found")
        agent = found[agent_id]
        # Hold the agent so that no batch run (or other synchronous step) writes its window meanwhile.
        # The hold is taken first (it locks the agent's row, as creating a run does), then the
        # batch steps are checked, so a run created at the same moment is seen either way.
        if not await agent_store.hold_for_sync_step(conn, agent_id, now, now + SYNC_HOLD, run_id=run_id):
            raise Conflict(f"agent {agent_id} is already being stepped synchronously; wait for that to finish")
        if await item_store.agents_in_open_steps(conn, [agent_id]):
            raise Conflict(f"agent {agent_id} is in an open step of a batch run; wait for it or cancel the run")
        answered = await answer_turn(conn, agent, answer, max_steps, client_tools)
        # Holding the agent, no other run of it can be stepping: a running one was cut off.
        await agent_run_store.fail_interrupted(conn, now, agent_id=agent_id)
        if not await agent_run_store.start_run(conn, run_id, now):
            out.cancelled = True
            await agent_store.release_sync_step(conn, agent_id, run_id)
            return out
        run = await agent_run_store.get_run(conn, org_id, run_id)
        assert run is not None
        step_inputs = StepInputs(now, summary_model=summary_model, run_id=run_id, step_id=step_id)
        messages = [
            user_message(agent, i.text, now, otid=i.otid, images=i.images, name=i.name)
            for i in inputs
            if i.text.strip() or i.images
        ]
        messages = [_tie(m, run_id, step_id) for m in messages]
        agent = await _add(conn, step_inputs, agent, messages)
        messages = step_inputs.messages
    try:
        out.messages.extend(messages)
        if listener is not None:
            await listener.messages(messages)
        state = first_state(agent, max_steps, client_tools=tuple(client_tools))
        asked = overrides.config(agent.llm_config)
        provider = providers.get(asked.provider)
        plan = step_inputs.summaries.get(agent.id)
        while True:
            while plan is not None:  # the window is summarized before the request that would overflow it
                summarized = await _summarize(
                    engine, providers, agent, plan, out, run_id=run_id, step_id=step_id, clock=clock
                )
                if summarized is None:
                    out.cancelled = True
                    return out
                agent, plan = summarized
            async with engine.connect() as conn:
                if out.steps and await agent_run_store.is_cancelled(conn, run_id):
                    out.cancelled = True
                    return out
            if answered is not None:
                # The answer's calls first: the model is called once they have their results.
                turn, answered = replace(answered, agent=agent), None
                response = turn.response
            else:
                async with engine.connect() as conn:
                    requests, problems = await build_requests(
                        conn, [replace(agent, llm_config=asked)], {agent.id: state}, CacheTiming(policy=cache_policy)
                    )
                    # A window read after its agent was deleted is empty: the run was cancelled with it.
                    if agent.id in problems and await agent_run_store.is_cancelled(conn, run_id):
                        out.cancelled = True
                        return out
                if agent.id in problems:
                    raise InvalidInput(f"agent {agent.id} cannot be stepped: {problems[agent.id]}")
                request = overrides.request(requests[agent.id])
                message_id = new_id("message")
                if listener is not None and listener.tokens:
                    response = await _streamed(provider, request, message_id, listener)
                else:
                    response = await provider.complete(request)
                turn = Turn(agent=agent, state=state, response=response, message_id=message_id)
            out.steps += 1
            out.usage += response.usage
            async with engine.connect() as conn:
                (result,) = await take_turns(
                    [turn],
                    search=StoreSearch(conn),
                    sandbox=sandbox,
                    now=clock.now(),
                )
            result = replace(result, messages=tuple(_tie(m, run_id, step_id) for m in result.messages))
            now = clock.now()
            step = AgentRunStep(
                id=step_id,
                model=asked.model,
                created_at=now,
                prompt_tokens=response.usage.prompt_tokens,
                completion_tokens=response.usage.output_tokens,
                cache_read_tokens=response.usage.cache_read_tokens,
                cache_write_tokens=response.usage.cache_write_tokens,
            )
            written = list(result.messages)
            async with engine.begin() as conn:
                # The agent's row, then the run's (the order a cancel or a deletion takes them in):
                # a run cancelled meanwhile (its agent deleted, say) writes nothing of this step.
                await agent_store.lock_agents(conn, [agent.id])
                added = await agent_run_store.add_step(conn, run, step, now)
                fresh = await agent_store.load_agents(conn, org_id, [agent.id])
                if added is None or agent.id not in fresh:
                    out.cancelled = True
                    return out
                run = added
                agent = (await write_turns(conn, fresh, [result], now))[agent.id]
                if result.continues:
                    step_id = new_id("step")
                    step_inputs = StepInputs(now, summary_model=summary_model, run_id=run_id, step_id=step_id)
                    heartbeat = [_tie(heartbeat_message(agent, now), run_id, step_id)] if result.heartbeat else []
                    agent = await _add(conn, step_inputs, agent, heartbeat, before=result.request_tokens)
                    plan = step_inputs.summaries.get(agent.id)
                    written.extend(step_inputs.messages)
            out.messages.extend(written)
            if listener is not None:
                await listener.messages(written)
            if not result.continues:
                out.stop = result.reason
                return out
            state = result.state
    finally:
        async with engine.begin() as conn:
            await agent_store.release_sync_step(conn, agent_id, run_id)


async def _add(
    conn: AsyncConnection,
    step_inputs: StepInputs,
    agent: Agent,
    messages: Sequence[Message],
    *,
    before: int | None = None,
) -> Agent:
    """Append ``messages`` (and a memory-pressure notice, if due) to the agent's window; returns the agent."""
    step_inputs.add(agent, messages, before=before)
    await step_inputs.prepare(conn)
    await step_inputs.write(conn)
    return step_inputs.agents[agent.id]


async def _summarize(
    engine: AsyncEngine,
    providers: ProviderSet,
    agent: Agent,
    plan: SummaryPlan,
    out: SyncResult,
    *,
    run_id: str,
    step_id: str,
    clock: Clock,
) -> tuple[Agent, SummaryPlan | None] | None:
    """Summarize what ``plan`` evicts through the normal API and put the summary in the window.

    Returns the agent as it is then, and the next plan should the window still be too big; None
    when the run was cancelled meanwhile (nothing is written then).
    """
    async with engine.connect() as conn:
        requests, _ = await build_requests(conn, [agent], {agent.id: StepState(summary=plan)})
    response = await providers.get(plan.model.partition("/")[0]).complete(requests[agent.id])
    out.usage += response.usage
    now = clock.now()
    summary = Summary(agent_id=agent.id, plan=plan, text=response.text or "", run_id=run_id, step_id=step_id)
    async with engine.begin() as conn:
        await agent_store.lock_agents(conn, [agent.id])
        if not await agent_run_store.still_running(conn, run_id, now):
            return None
        fresh = await agent_store.load_agents(conn, agent.organization_id, [agent.id])
        if agent.id not in fresh:
            return None
        agent = (await write_summaries(conn, fresh, [summary], now))[agent.id]
        again = StepInputs(now, summary_model=plan.model, run_id=run_id, step_id=step_id)
        agent = await _add(conn, again, agent, [])
    return agent, again.summaries.get(agent.id)


async def _streamed(
    provider: ChatProvider, request: ModelRequest, message_id: str, listener: SyncListener
) -> ModelResponse:
    """The answer to ``request`` through the provider's streaming API, its pieces told to ``listener``."""
    async with aclosing(provider.stream(request)) as events:
        async for event in events:
            if isinstance(event, StreamEnd):
                return event.response
            await listener.delta(message_id, event)
    raise ProviderError(
        "the provider's stream ended without its answer", kind=ProviderErrorKind.API_ERROR, retryable=True
    )
