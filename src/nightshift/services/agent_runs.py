"""Agent runs as the API sees them: a send to one agent, in the foreground or the background.

A foreground send (``POST /v1/agents/{id}/messages``) steps the agent inside the request; a
background send (``.../messages/async``) answers with the created run at once and steps the
agent in a task of the server process that took the request (:class:`BackgroundRuns`). A
background run still open when that process stops is failed: by the process itself when it
shuts down, and at the next start of any server process sharing the database when it crashed
(``fail_interrupted``). It is not resumed: the messages it wrote stay, and a new send goes on.
When a background run with a ``callback_url`` ends, the URL gets a POST (up to 5 attempts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.callbacks import CallbackRules, check_callback_url, post_callback
from nightshift.clock import Clock
from nightshift.domain.agent_runs import AgentRun, AgentRunStatus
from nightshift.domain.approvals import Answer, ClientTool
from nightshift.domain.messages import Message, UserInput
from nightshift.domain.usage import Usage
from nightshift.errors import InvalidInput, NightshiftError, NotFound
from nightshift.ids import new_id
from nightshift.providers.clients import ProviderSet
from nightshift.runtime.step import TurnReason, Why
from nightshift.runtime.sync import SyncListener, SyncResult, step_agent
from nightshift.store import agent_runs as agent_run_store
from nightshift.store import agents as agent_store
from nightshift.store import batch_run_views, run_listing
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import messages as message_store
from nightshift.store.pagination import Page
from nightshift.store.run_listing import Listed, ListedBatchRun, RunFilter
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """One send to one agent, as the API took it."""

    agent_id: str
    inputs: Sequence[UserInput]
    max_steps: int
    request_config: dict[str, Any]
    callback_url: str | None = None
    answer: Answer | None = None  # the client's answer to the approval request the agent awaits
    client_tools: Sequence[ClientTool] = ()  # tools the client runs itself, offered for this send


@dataclass(frozen=True, slots=True, kw_only=True)
class Stepping:
    """What stepping one agent in a request (or in the background) uses."""

    engine: AsyncEngine
    providers: ProviderSet
    sandbox: Sandbox
    clock: Clock  # what runs, steps and messages are stamped with
    # The model that summarizes agents' evicted messages (provider/model); None: each agent's own.
    summary_model: str | None = None


class BackgroundRuns:
    """The background runs of this server process: started, waited for, failed at shutdown."""

    def __init__(self, stepping: Stepping, callbacks: CallbackRules) -> None:
        self.stepping = stepping
        self.engine = stepping.engine
        self.clock = stepping.clock
        self.callbacks = callbacks
        self._tasks: dict[asyncio.Task[None], AgentRun] = {}

    def start(self, work: Coroutine[Any, Any, None], run: AgentRun) -> None:
        """Step ``run`` with ``work`` in the background, keeping a reference until it ends."""
        task = asyncio.create_task(work, name=f"run {run.id}")
        self._tasks[task] = run
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def close(self) -> None:
        """Stop the runs in flight and fail them, letting go of their agents: this process will
        not finish them."""
        runs = dict(self._tasks)
        for task in runs:
            task.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
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
                    await agent_store.release_sync_step(conn, run.agent_id)


async def fail_stopped_runs(conn: AsyncConnection, now: datetime) -> int:
    """At startup: fail the open runs that no process steps any more (their process stopped), ended at ``now``."""
    return await agent_run_store.fail_interrupted(conn, now)


def letta_stop_reason(result: SyncResult) -> str:
    """Letta's name for why the run ended."""
    if result.cancelled:
        return "cancelled"
    return LETTA_STOP_REASONS.get(result.stop, "end_turn")


async def _new_run(engine: AsyncEngine, org_id: str, send: Send, *, background: bool, now: datetime) -> AgentRun:
    run = AgentRun(
        id=new_id("run"),
        organization_id=org_id,
        agent_id=send.agent_id,
        status=AgentRunStatus.CREATED,
        background=background,
        created_at=now,
        updated_at=now,
        request_config=send.request_config,
        callback_url=send.callback_url,
    )
    async with engine.begin() as conn:
        if not await agent_store.load_agents(conn, org_id, [send.agent_id]):
            raise NotFound(f"agent {send.agent_id} not found")
        await agent_run_store.insert_run(conn, run)
    return run


async def _step(stepping: Stepping, run: AgentRun, send: Send, *, listener: SyncListener | None = None) -> SyncResult:
    """Step the run's agent and end the run as it went; errors end it failed and go on up."""
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
            answer=send.answer,
            client_tools=send.client_tools,
        )
    except Exception as exc:
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
    async with engine.begin() as conn:
        await agent_run_store.finish_run(
            conn, run.id, status, stepping.clock.now(), stop_reason=letta_stop_reason(result)
        )
    return result


async def send_now(
    stepping: Stepping, org_id: str, send: Send, *, listener: SyncListener | None = None
) -> tuple[AgentRun, SyncResult]:
    """Step the agent in this request, as a run; returns the ended run and what it wrote
    (``listener`` hears it as it goes: the streamed send).

    Raises:
        NotFound: no such agent.
        InvalidInput, Conflict, ProviderError: as :func:`step_agent` (the run ends failed).
    """
    run = await _new_run(stepping.engine, org_id, send, background=False, now=stepping.clock.now())
    result = await _step(stepping, run, send, listener=listener)
    return run, result


async def send_later(background: BackgroundRuns, org_id: str, send: Send) -> AgentRun:
    """Create a run and step the agent in the background; returns the run as created.

    Raises:
        NotFound: no such agent.
        InvalidInput: no message text, or a callback URL the server does not call.
    """
    if send.answer is None and not any(i.text.strip() for i in send.inputs):
        raise InvalidInput("give at least one message with text", field="messages")
    if send.callback_url is not None:
        await check_callback_url(send.callback_url, allow_private=background.callbacks.allow_private)
    run = await _new_run(background.engine, org_id, send, background=True, now=background.clock.now())
    background.start(_background(background, run, send), run)
    return run


async def _background(background: BackgroundRuns, run: AgentRun, send: Send) -> None:
    try:
        await _step(background.stepping, run, send)
    except NightshiftError as exc:
        log.warning("background run %s failed: %s", run.id, exc.message)
    except Exception:
        log.exception("background run %s failed", run.id)
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
) -> list[str]:
    """Cancel the agent's open runs (those of ``run_ids``, or all) at ``now``; a running one stops before its next
    step.

    Raises:
        NotFound: no such agent.
    """
    async with engine.begin() as conn:
        if not await agent_store.load_agents(conn, org_id, [agent_id]):
            raise NotFound(f"agent {agent_id} not found")
        return await agent_run_store.cancel_runs(conn, org_id, agent_id, run_ids, now)


async def get_any_run(conn: AsyncConnection, org_id: str, run_id: str) -> Listed:
    """An agent run, or a batch run (shown with its first agent).

    Raises:
        NotFound: neither, in this organization.
    """
    run = await agent_run_store.get_run(conn, org_id, run_id)
    if run is not None:
        return run
    batch = await batch_run_store.get_run(conn, org_id, run_id)
    if batch is None:
        raise NotFound(f"run {run_id} not found")
    agents = await run_listing.first_agents(conn, [batch.id], ())
    return ListedBatchRun(run=batch, agent_id=agents.get(batch.id))


async def list_any_runs(conn: AsyncConnection, org_id: str, where: RunFilter, page: Page) -> list[Listed]:
    """A page of the organization's agent runs and batch runs, by creation time."""
    return await run_listing.list_runs(
        conn, org_id, where, after=page.after, before=page.before, limit=page.limit, ascending=page.order == "asc"
    )


async def messages_of_any_run(
    conn: AsyncConnection, org_id: str, run_id: str, page: Page
) -> tuple[Listed, list[Message]]:
    """The run and a page of the messages it wrote (for a batch run: of all its agents).

    Raises:
        NotFound: no such run in this organization.
    """
    run = await get_any_run(conn, org_id, run_id)
    if isinstance(run, AgentRun):
        return run, await message_store.list_run_messages(conn, run.id, page)
    return run, await batch_run_views.run_messages(conn, run.run.id, page)


async def usage_of_any_run(conn: AsyncConnection, org_id: str, run_id: str) -> RunUsage:
    """The tokens the run used, over all its steps (and, for a batch run, all its agents).

    Raises:
        NotFound: no such run in this organization.
    """
    run = await get_any_run(conn, org_id, run_id)
    if isinstance(run, AgentRun):
        return RunUsage(
            prompt=sum(s.prompt_tokens for s in run.steps),
            completion=sum(s.completion_tokens for s in run.steps),
            cache_read=sum(s.cache_read_tokens for s in run.steps),
            cache_write=sum(s.cache_write_tokens for s in run.steps),
        )
    usage = (await batch_run_views.run_progress(conn, run.run.id)).usage or Usage()
    cache_read, cache_write = usage.cache_read_tokens, usage.cache_write_tokens
    return RunUsage(
        prompt=usage.input_tokens + cache_read + cache_write,
        completion=usage.output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunUsage:
    """Tokens of a run; ``prompt`` counts the cached ones too."""

    prompt: int
    completion: int
    cache_read: int
    cache_write: int
