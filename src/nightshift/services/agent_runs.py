"""Agent runs as the API sees them: a send to one agent, in the foreground or the background.

A foreground send (``POST /v1/agents/{id}/messages``) steps the agent inside the request; a
background send (``.../messages/async``, or a streamed send with ``background: true``) steps the
agent in a task of the server process that took the request (:class:`BackgroundRuns`), whatever
becomes of the request, and stores the run's stream as it goes (``services.run_streams``) so
that any process can replay and follow it. The process renews the leases of its background runs
(``lease_until``) while it steps them. A background run still open when that process stops is
failed: by the process itself when it shuts down; after a crash, at the next start of any server
process sharing the database (``fail_interrupted``, and ``fail_expired`` once its lease is past)
or by the first reader of its stream that finds its lease expired. It is not resumed: the
messages it wrote stay, its stream ends with the failure, and a new send goes on.
When a background run with a ``callback_url`` ends, the URL gets a POST (up to 5 attempts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.callbacks import CallbackRules, check_callback_url, post_callback
from nightshift.batch.cancel_agent import AGENT_CANCELLED, leave_runs
from nightshift.clock import Clock
from nightshift.domain.agent_runs import AgentRun, AgentRunStatus
from nightshift.domain.approvals import Answer, ClientTool
from nightshift.domain.caching import CachePolicy
from nightshift.domain.messages import UserInput
from nightshift.domain.run_chunks import ChunkKind
from nightshift.errors import Conflict, InvalidInput, NightshiftError, NotFound
from nightshift.ids import new_id
from nightshift.providers.clients import ProviderSet
from nightshift.runtime.step import TurnReason, Why
from nightshift.runtime.sync import Overrides, SyncListener, SyncResult, step_agent
from nightshift.services.catalog import model_context_window
from nightshift.services.run_streams import ChunkLog, Wakeups, fail_lost_in
from nightshift.store import agent_runs as agent_run_store
from nightshift.store import agents as agent_store
from nightshift.store import groups as group_store
from nightshift.store import items as item_store
from nightshift.tools.sandbox import Sandbox

log = logging.getLogger(__name__)

# Letta's stop reasons, by why the agent's last turn ended its run (the rest are "end_turn").
LETTA_STOP_REASONS: dict[Why, str] = {
    TurnReason.MAX_STEPS: "max_steps",
    TurnReason.TOOL_RULES: "tool_rule",
    TurnReason.ERROR: "error",
    TurnReason.REQUIRES_APPROVAL: "requires_approval",
}
STOPPED = "the server stopped while the run was stepping"
CALLBACK_ATTEMPTS = 5
CALLBACK_DELAY = timedelta(seconds=2)
DEFAULT_LEASE = timedelta(seconds=30)

# How a background run's stream is made: the listener that writes a run's chunks to its log,
# and the last chunks of the stream once the run stepped to its end (or failed with an error).
Listen = Callable[[AgentRun, ChunkLog], SyncListener]
Ending = Callable[[AgentRun, "SyncResult | Exception"], list[tuple[ChunkKind, dict[str, Any] | None]]]
Settle = Callable[["SyncResult | Exception"], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorder:
    """How the API turns a background run into its stream's chunks (``api.run_stream``)."""

    listen: Listen
    ending: Ending


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """One send to one agent, as the API took it."""

    agent_id: str
    inputs: Sequence[UserInput]
    max_steps: int
    request_config: dict[str, Any]
    callback_url: str | None = None
    # The model (provider/model-name, checked) and system prompt of this send's calls instead of
    # the agent's own; the agent is not changed.
    override_model: str | None = None
    override_system: str | None = None
    answer: Answer | None = None  # the client's answer to the approval request the agent awaits
    client_tools: Sequence[ClientTool] = ()  # tools the client runs itself, offered for this send

    def overrides(self) -> Overrides:
        """What the send changes of its steps' calls."""
        window = None
        if self.override_model is not None:
            provider, _, name = self.override_model.partition("/")
            window = model_context_window(provider, name)
        return Overrides(model=self.override_model, model_window=window, system=self.override_system)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stepping:
    """What stepping one agent in a request (or in the background) uses."""

    engine: AsyncEngine
    providers: ProviderSet
    sandbox: Sandbox
    clock: Clock  # what runs, steps and messages are stamped with
    # The model that summarizes agents' evicted messages (provider/model); None: each agent's own.
    summary_model: str | None = None
    cache_policy: CachePolicy = CachePolicy.AUTO  # the prompt cache's marks (``domain/caching.py``)


class BackgroundRuns:
    """The background runs of this server process: started, waited for, failed at shutdown."""

    def __init__(self, stepping: Stepping, callbacks: CallbackRules, *, lease: timedelta = DEFAULT_LEASE) -> None:
        self.stepping = stepping
        self.engine = stepping.engine
        self.clock = stepping.clock
        self.callbacks = callbacks
        self.lease = lease  # renewed every third of it while a run steps
        self.wakeups = Wakeups()  # this process's readers of streams
        self._tasks: dict[asyncio.Task[None], AgentRun] = {}
        self._renewer: asyncio.Task[None] | None = None

    def start(self, work: Coroutine[Any, Any, None], run: AgentRun) -> None:
        """Step ``run`` with ``work`` in the background, keeping a reference until it ends."""
        task = asyncio.create_task(work, name=f"run {run.id}")
        self._tasks[task] = run
        task.add_done_callback(lambda done: self._tasks.pop(done, None))
        self.watch()

    def watch(self) -> None:
        """Start renewing this process's leases and failing the runs of dead processes (once)."""
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew(), name="background run leases")

    async def _renew(self) -> None:
        """Every third of a lease: renew the leases of this process's background runs (one
        statement), then fail the open runs whose lease expired (their process died), so that no
        run stays running for ever even when nobody reads its stream and no server starts."""
        while True:
            await asyncio.sleep(self.lease.total_seconds() / 3)
            ids = [run.id for run in self._tasks.values()]
            try:
                async with self.engine.begin() as conn:
                    await agent_run_store.renew_leases(conn, ids, self.clock.now() + self.lease)
                    await fail_lost_in(conn, self.clock.now())
            except Exception:
                log.exception("the leases of background runs could not be renewed or checked")

    async def close(self) -> None:
        """Stop the runs in flight and fail them, letting go of their agents: this process will
        not finish them."""
        runs = dict(self._tasks)
        # The renewer is awaited too: cut off in a write, it holds SQLite's lock until its rollback.
        stopping = [*runs, *([self._renewer] if self._renewer is not None else [])]
        for task in stopping:
            task.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)
        now = self.clock.now()
        async with self.engine.begin() as conn:
            for run in runs.values():
                current = await agent_run_store.get_run(conn, run.organization_id, run.id)
                if current is None or current.status.ended:
                    continue
                await agent_run_store.finish_run(
                    conn, run.id, AgentRunStatus.FAILED, now, stop_reason="error", error=STOPPED
                )
                if current.status is AgentRunStatus.RUNNING:  # it holds its agent (a created one does not yet)
                    await agent_store.release_sync_step(conn, run.agent_id, run.id)


async def fail_stopped_runs(conn: AsyncConnection, now: datetime) -> int:
    """At startup: fail the open runs that no process steps any more (their process stopped), ended at ``now``:
    those whose agent no step holds, and the background runs whose lease expired."""
    return await agent_run_store.fail_interrupted(conn, now) + len(await fail_lost_in(conn, now))


def letta_stop_reason(result: SyncResult) -> str:
    """Letta's name for why the run ended."""
    if result.cancelled:
        return "cancelled"
    return LETTA_STOP_REASONS.get(result.stop, "end_turn")


async def _new_run(
    engine: AsyncEngine,
    org_id: str,
    send: Send,
    *,
    background: bool,
    now: datetime,
    run_id: str | None = None,
    lease_until: datetime | None = None,
) -> AgentRun:
    run = AgentRun(
        id=run_id or new_id("run"),
        organization_id=org_id,
        agent_id=send.agent_id,
        status=AgentRunStatus.CREATED,
        background=background,
        created_at=now,
        updated_at=now,
        request_config=send.request_config,
        callback_url=send.callback_url,
        lease_until=lease_until,
    )
    async with engine.begin() as conn:
        if not await agent_store.load_agents(conn, org_id, [send.agent_id]):
            raise NotFound(f"agent {send.agent_id} not found")
        await agent_run_store.insert_run(conn, run)
    return run


async def _step(
    stepping: Stepping,
    run: AgentRun,
    send: Send,
    *,
    listener: SyncListener | None = None,
    settle: Settle | None = None,
) -> SyncResult:
    """Step the run's agent and end the run as it went; errors end it failed and go on up.

    ``settle`` hears how the stepping ended before the run is ended (a background run's stream
    is ended there, so that a reader who sees the run ended finds the stream's end stored).
    """
    engine = stepping.engine
    try:
        result = await step_agent(
            engine,
            stepping.providers,
            stepping.sandbox,
            run.organization_id,
            run.agent_id,
            send.inputs,
            max_steps=send.max_steps,
            run_id=run.id,
            listener=listener,
            clock=stepping.clock,
            summary_model=stepping.summary_model,
            cache_policy=stepping.cache_policy,
            overrides=send.overrides(),
            answer=send.answer,
            client_tools=send.client_tools,
        )
    except Exception as exc:
        await _settle(settle, exc, run.id)
        # A bug is a failed run too (its message stays in the log, not on the run).
        error = exc.message if isinstance(exc, NightshiftError) else "internal error"
        async with engine.begin() as conn:
            await agent_run_store.finish_run(
                conn, run.id, AgentRunStatus.FAILED, stepping.clock.now(), stop_reason="error", error=error
            )
        raise
    status = AgentRunStatus.COMPLETED
    if result.cancelled:
        status = AgentRunStatus.CANCELLED
    elif result.stop is TurnReason.ERROR:
        status = AgentRunStatus.FAILED
    await _settle(settle, result, run.id)
    async with engine.begin() as conn:
        now = stepping.clock.now()
        ended = await agent_run_store.finish_run(conn, run.id, status, now, stop_reason=letta_stop_reason(result))
        if ended and status is AgentRunStatus.COMPLETED and result.stop is not TurnReason.REQUIRES_APPROVAL:
            # A finished turn counts towards the agent's sleep-time group (and may make it due).
            await group_store.count_turns(conn, [run.agent_id], now)
    return result


async def _settle(settle: Settle | None, outcome: SyncResult | Exception, run_id: str) -> None:
    if settle is None:
        return
    try:
        await settle(outcome)
    except Exception:  # the run still ends; its readers make its stream's end from it
        log.exception("the end of run %s's stream could not be stored", run_id)


async def send_now(
    stepping: Stepping,
    org_id: str,
    send: Send,
    *,
    listener: SyncListener | None = None,
    run_id: str | None = None,
) -> tuple[AgentRun, SyncResult]:
    """Step the agent in this request, as a run (``run_id``: the id it gets, if given); returns the
    ended run and what it wrote (``listener`` hears it as it goes: the streamed send).

    Raises:
        NotFound: no such agent.
        InvalidInput, Conflict, ProviderError: as :func:`step_agent` (the run ends failed).
    """
    run = await _new_run(stepping.engine, org_id, send, background=False, now=stepping.clock.now(), run_id=run_id)
    result = await _step(stepping, run, send, listener=listener)
    return run, result


async def send_later(background: BackgroundRuns, org_id: str, send: Send, recorder: Recorder) -> AgentRun:
    """Create a run and step the agent in the background, its stream stored; returns the run as created.

    Raises:
        NotFound: no such agent.
        InvalidInput: no message text, or a callback URL the server does not call.
    """
    run, _ = await _start_background(background, org_id, send, recorder)
    return run


async def stream_later(background: BackgroundRuns, org_id: str, send: Send, recorder: Recorder) -> AgentRun:
    """Step the agent in the background, its stream stored, and return the run once its stream has
    begun: the client reads it with :func:`services.run_streams.follow`, and may go away.

    Raises:
        NotFound: no such agent.
        InvalidInput, Conflict: refused before anything was written (as :func:`send_now`; the run ends failed).
    """
    run, refused = await _start_background(background, org_id, send, recorder)
    error = await refused
    if error is not None:
        raise error
    return run


async def _start_background(
    background: BackgroundRuns, org_id: str, send: Send, recorder: Recorder
) -> tuple[AgentRun, asyncio.Future[Exception | None]]:
    """Create the run and start stepping it; the future says, once its stream has begun or it
    failed, the error that refused it before anything was written (None: its stream has begun)."""
    if send.answer is None and not any(i.text.strip() for i in send.inputs):
        raise InvalidInput("give at least one message with text", field="messages")
    if send.callback_url is not None:
        await check_callback_url(send.callback_url, allow_private=background.callbacks.allow_private)
    now = background.clock.now()
    run = await _new_run(background.engine, org_id, send, background=True, now=now, lease_until=now + background.lease)
    chunks = ChunkLog(
        background.engine, run.id, clock=background.clock, lease=background.lease, wakeups=background.wakeups
    )
    refused: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
    background.start(_background(background, run, send, recorder, chunks, refused), run)
    return run, refused


async def _background(
    background: BackgroundRuns,
    run: AgentRun,
    send: Send,
    recorder: Recorder,
    chunks: ChunkLog,
    refused: asyncio.Future[Exception | None],
) -> None:
    async def settle(outcome: SyncResult | Exception) -> None:
        if isinstance(outcome, Exception) and not chunks.written.is_set():
            return  # refused before its stream began: it has none (its readers get the failed run's end)
        await chunks.close(recorder.ending(run, outcome))

    async def begun() -> None:
        await chunks.written.wait()
        if not refused.done():
            refused.set_result(None)

    watch = asyncio.create_task(begun())
    try:
        await _step(background.stepping, run, send, listener=recorder.listen(run, chunks), settle=settle)
    except asyncio.CancelledError:
        chunks.abandon()  # the process stops: the run is failed by BackgroundRuns.close
        raise
    except NightshiftError as exc:
        log.warning("background run %s failed: %s", run.id, exc.message)
        if not refused.done() and not chunks.written.is_set():
            refused.set_result(exc)
    except Exception as exc:
        log.exception("background run %s failed", run.id)
        if not refused.done() and not chunks.written.is_set():
            refused.set_result(exc)
    finally:
        watch.cancel()
        if not refused.done():
            refused.set_result(None)
    if run.callback_url is not None:
        await _callback(background, run.id, run.organization_id)


async def _callback(background: BackgroundRuns, run_id: str, org_id: str) -> None:
    """POST the ended run to its callback_url, retrying with backoff; the last answer is kept."""
    async with background.engine.connect() as conn:
        run = await agent_run_store.get_run(conn, org_id, run_id)
    if run is None or run.callback_url is None:
        return
    body = {
        "job_id": run.id,
        "status": run.status.value,
        "completed_at": run.completed_at.isoformat() if run.completed_at else None,
        "metadata": run.metadata,
    }
    for attempt in range(CALLBACK_ATTEMPTS):
        code: int | None = None
        try:
            target = await check_callback_url(run.callback_url, allow_private=background.callbacks.allow_private)
            response = await post_callback(target, body)
            code, error = response.status_code, None if response.is_success else f"HTTP {response.status_code}"
        except InvalidInput as exc:
            error = f"callback not sent: {exc.message}"
        except httpx.HTTPError as exc:
            error = f"callback failed: {type(exc).__name__}: {exc}"
        async with background.engine.begin() as conn:
            await agent_run_store.record_callback(
                conn, run.id, sent_at=background.clock.now(), status_code=code, error=error
            )
        if error is None or error.startswith("callback not sent"):
            return
        log.warning("run %s: %s (attempt %d)", run.id, error, attempt + 1)
        await asyncio.sleep(CALLBACK_DELAY.total_seconds() * 2**attempt)


async def cancel(
    engine: AsyncEngine, org_id: str, agent_id: str, run_ids: Sequence[str] | None, *, now: datetime
) -> dict[str, str]:
    """Cancel the agent's open runs (those of ``run_ids``, or all) at ``now``, as Letta answers it:
    each run id with ``cancelled``, or ``failed`` for an id that is no run of the agent.

    An agent run stops at once: its agent is free for a new send, and the step in flight (in a
    request or the background, in any server process) ends without writing more. In a batch run
    (a run too, by its id) only the agent's part ends: its step's item is cancelled and the
    provider's answer for it never applied, the other agents go on. A run that had ended already
    is ``cancelled`` and unchanged (Letta's no-op).

    Raises:
        NotFound: no such agent.
        Conflict: no ``run_ids`` given (or none), and nothing of the agent is running (Letta's 409).
    """
    run_ids = run_ids or None  # an empty list asks for all, as Letta reads it
    async with engine.begin() as conn:
        if not await agent_store.agent_exists(conn, org_id, agent_id):
            raise NotFound(f"agent {agent_id} not found")
        # The batch runs' rows, then the agent's, then its agent runs': every step's lock order.
        left = await leave_runs(conn, agent_id, AGENT_CANCELLED, now, run_ids=run_ids)
        await agent_store.lock_agents(conn, [agent_id])
        cancelled = await agent_run_store.cancel_runs(conn, org_id, agent_id, run_ids, now)
        await agent_store.release_holds_of_runs(conn, agent_id, cancelled)
        if run_ids is None:
            if not cancelled and not left:
                raise Conflict(f"no active runs to cancel for agent {agent_id}")
            return dict.fromkeys([*cancelled, *sorted(left)], "cancelled")
        wanted = list(dict.fromkeys(run_ids))
        known = await agent_run_store.runs_of_agent(conn, org_id, agent_id, wanted)
        known |= await item_store.runs_with_agent(conn, agent_id, wanted)
    return {run_id: "cancelled" if run_id in known or run_id in left else "failed" for run_id in wanted}
