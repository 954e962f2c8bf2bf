"""Batch runs as the API sees them: queueing one (safely retried), reading it, cancelling it."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.callbacks import CallbackRules, check_callback_url
from nightshift.batch.polling import LATEST_ENDS
from nightshift.batch.steps import cancel_batch_run, queue_batch_run
from nightshift.batch.worker import Worker
from nightshift.domain.approvals import Answer
from nightshift.domain.batch_progress import BatchRunProgress, KindCosts
from nightshift.domain.batches import (
    BatchItem,
    BatchRun,
    BatchRunFailure,
    BatchRunKind,
    BatchRunRequest,
    BatchRunStatus,
    ItemOutcome,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
    StepStatus,
)
from nightshift.domain.costs import Costs
from nightshift.domain.messages import Message
from nightshift.domain.polling import Turnarounds
from nightshift.domain.usage import Usage
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.providers.openai import webhooks as openai_webhooks
from nightshift.runtime.answers import prepare_answers, release, run_answers, write_answers
from nightshift.store import batch_run_views
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import provider_batches as batch_store
from nightshift.store.pagination import Page
from nightshift.tools.sandbox import Sandbox

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRunView:
    """A run with its progress, its provider batches (the step timeline) and its failed agents."""

    run: BatchRun
    progress: BatchRunProgress
    batches: list[ProviderBatch]
    failures: list[BatchRunFailure] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentInBatchRun:
    """One agent of a run: where it is, how many steps it answered, its tokens and cost."""

    agent_id: str
    agent_name: str
    state: str  # running, or the outcome of its last step (finished, failed, cancelled...)
    steps: int
    step_number: int  # of its last item: the step it is in, or stopped (or failed) at; from 0
    usage: Usage | None  # None: none of its items has a usage yet
    cost: Costs
    error: str | None
    agent_deleted: bool = False  # since the run: its name is the one it had
    items: Sequence[BatchItem] = ()  # its requests, one per step (and summary), in order


@dataclass(frozen=True, slots=True, kw_only=True)
class NewBatchRun:
    """What ``POST /v1/messages/batches`` asked for."""

    requests: Sequence[BatchRunRequest]
    callback_url: str | None = None
    metadata: dict[str, Any] | None = None
    # When it is to be done by: a time, or a time from when it is made (``domain/deadlines.py``).
    deadline: datetime | None = None
    finish_within: timedelta | None = None
    idempotency_key: str | None = None
    # The request as it came (JSON), to tell a retry from another request under the same key.
    body: dict[str, Any] = field(default_factory=dict)
    # The answers to approval requests the agents await, by agent id (their requests are ``answered``).
    answers: Mapping[str, Answer] = field(default_factory=dict)
    # What runs the approved calls of ``answers``.
    sandbox: Sandbox | None = None


async def start_batch_run(
    engine: AsyncEngine,
    org_id: str,
    new: NewBatchRun,
    *,
    now: datetime,
    default_max_steps: int,
    callbacks: CallbackRules,
    queued: asyncio.Event | None = None,
) -> BatchRunView:
    """Queue a run for a poller to write and submit its first step (``batch/run_queue.py``), and
    answer with it, still created; a retry with the same Idempotency-Key and body gets the run
    the first request made.

    Only the checks that need no agent loaded are made here, in the transaction that writes the
    run and its requests and reserves its agents; ``queued`` (the poller's event, when it runs on
    this event loop) is set once it is committed. The run is made at ``now``. ``new.answers``
    (requests that answer their agents' approval requests) are checked first, their calls run,
    and their results written with the run (``runtime/answers.py``).

    Raises:
        InvalidInput: bad requests, a callback URL on a private address, or an Idempotency-Key
            used for another request.
        NotFound: an agent of another organization, or none.
        Conflict: an agent already stepping, awaiting an approval it is sent no answer to, or
            sent an answer while awaiting none.
    """
    digest = hashlib.sha256(orjson.dumps(new.body, option=orjson.OPT_SORT_KEYS)).hexdigest()
    if new.idempotency_key is not None:
        async with engine.connect() as conn:
            earlier = await _same_request(conn, org_id, new.idempotency_key, digest)
        if earlier is not None:
            return earlier
    if new.callback_url is not None:
        await check_callback_url(new.callback_url, allow_private=callbacks.allow_private)
    deadline = now + new.finish_within if new.finish_within is not None else new.deadline
    if deadline is not None and deadline <= now:
        raise InvalidInput(f"the deadline {deadline.isoformat()} has passed", field="deadline")
    # Answers are checked (their agents held) and their calls run first, outside any transaction;
    # their results are written with the run, so that a refused run leaves the agents waiting.
    held = await prepare_answers(engine, org_id, new.answers, now=now, max_steps=default_max_steps)
    try:
        if held.turns:
            assert new.sandbox is not None, "a run that answers approval requests needs the sandbox"
            await run_answers(engine, new.sandbox, held, now=now)
        async with engine.begin() as conn:
            await write_answers(conn, held, now=now)
            run = await queue_batch_run(
                conn,
                org_id,
                new.requests,
                now=now,
                callback_url=new.callback_url,
                default_max_steps=default_max_steps,
                metadata=new.metadata,
                idempotency_key=new.idempotency_key,
                request_hash=digest,
                deadline_at=deadline,
            )
    except (Conflict, IntegrityError):
        # The same request, sent twice at once: the first one made the run (and holds its agents).
        if new.idempotency_key is not None:
            async with engine.connect() as conn:
                earlier = await _same_request(conn, org_id, new.idempotency_key, digest)
            if earlier is not None:
                return earlier
        raise
    finally:
        await release(engine, held)
    if queued is not None:
        queued.set()
    async with engine.connect() as conn:
        return await batch_run_view(conn, org_id, run.id)


async def stop_batch_run(engine: AsyncEngine, worker: Worker, org_id: str, run_id: str) -> BatchRunView:
    """Cancel a run and tell the provider about its open batches (see ``batch.steps.cancel_run``)."""
    # Held under a name of this request's own: the poller may be working on these batches, and
    # its release must not free them while this request cancels them (one cancel, not two).
    worker = worker.for_request()
    async with engine.begin() as conn:
        await cancel_batch_run(conn, org_id, run_id, worker.parts.clock.now(), lease=worker.leases.lease())
        open_batches = [
            b
            for b in await batch_store.provider_batches_of_run(conn, run_id)
            if b.status is ProviderBatchStatus.CANCELLING
        ]
    for batch in open_batches:
        await worker.cancel(batch)
    async with engine.connect() as conn:
        return await batch_run_view(conn, org_id, run_id)


async def batch_run_view(conn: AsyncConnection, org_id: str, run_id: str) -> BatchRunView:
    """The run, or NotFound (also for another organization's run)."""
    run = await batch_run_store.get_run(conn, org_id, run_id)
    if run is None:
        raise NotFound(f"batch run {run_id} not found")
    (view,) = await views_of(conn, [run])
    return view


async def list_batch_run_views(
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    statuses: Sequence[BatchRunStatus] = (),
    has_failures: bool | None = None,
    kind: BatchRunKind | None = None,
) -> list[BatchRunView]:
    """A page of the organization's runs; ``has_failures``: only those that failed or had an agent
    fail (True), or neither (False)."""
    runs = await batch_run_store.list_runs(conn, org_id, page, statuses=statuses, has_failures=has_failures, kind=kind)
    return await views_of(conn, runs)


async def costs_by_kind(conn: AsyncConnection, org_id: str) -> list[KindCosts]:
    """What the organization's batch runs cost, by kind: the users' runs and the sleep-time agents'."""
    return list((await batch_run_store.costs_by_kind(conn, org_id)).values())


async def openai_webhook(engine: AsyncEngine, payload: bytes, headers: Mapping[str, str], now: datetime) -> bool:
    """Take a webhook of OpenAI's: when it says a batch ended, that batch is due at once. True when
    it made a running batch due. The check runs on a thread: the first one imports the SDK."""
    batch_id = await asyncio.to_thread(openai_webhooks.ended_batch_id, payload, headers)
    if batch_id is None:
        return False
    async with engine.begin() as conn:
        return await batch_store.make_due(conn, "openai", batch_id, now)


async def turnarounds(conn: AsyncConnection, org_id: str) -> Turnarounds:
    """How long the organization's latest provider batches took, submit to end, by provider and
    by model: how many ended, and their spread once there are enough (what the poll schedule follows)."""
    return Turnarounds.of(await batch_store.recent_turnarounds(conn, latest=LATEST_ENDS, org_id=org_id))


async def messages_of_batch_run(
    conn: AsyncConnection, org_id: str, run_id: str, page: Page, *, agent_id: str | None = None
) -> list[Message]:
    """A page of the run's messages (inputs, assistant and tool messages, heartbeats)."""
    await _get(conn, org_id, run_id)
    return await batch_run_views.run_messages(conn, run_id, page, agent_id=agent_id)


async def agents_of_batch_run(
    conn: AsyncConnection, org_id: str, run_id: str, *, after: str | None, limit: int
) -> list[AgentInBatchRun]:
    """A page of the run's agents (by agent id), each summed over its items."""
    await _get(conn, org_id, run_id)
    out = []
    for agent in await batch_run_views.run_agent_items(conn, run_id, after=after, limit=limit):
        items = agent.items
        last = items[-1]
        used = [item.usage for item in items if item.usage is not None]
        state = "running" if last.step_status is StepStatus.PAUSED else (last.outcome or ItemOutcome.FINISHED).value
        out.append(
            AgentInBatchRun(
                agent_id=agent.agent_id,
                agent_name=agent.agent_name,
                state=state,
                # Steps answered; a summary of the agent's window is not one (its cost counts).
                steps=sum(1 for i in items if i.request_status is RequestStatus.COMPLETED and not i.step_state.summary),
                step_number=last.step_state.step_number,
                usage=sum(used[1:], used[0]) if used else None,
                cost=sum((item.cost for item in items), Costs()),
                # A step closed early for the agent alone (deleted, or its part cancelled) holds
                # the reason: it tells why it stopped (a cancelled run's steps hold none).
                error=last.error if last.outcome in (ItemOutcome.FAILED, ItemOutcome.CANCELLED) else None,
                agent_deleted=agent.agent_deleted,
                items=items,
            )
        )
    return out


async def _get(conn: AsyncConnection, org_id: str, run_id: str) -> BatchRun:
    run = await batch_run_store.get_run(conn, org_id, run_id)
    if run is None:
        raise NotFound(f"batch run {run_id} not found")
    return run


async def views_of(conn: AsyncConnection, runs: Sequence[BatchRun]) -> list[BatchRunView]:
    """The runs with their progress, provider batches and failed agents: two to five statements in all,
    whatever the runs' sizes (see ``batch_run_views.runs_progress``)."""
    ids = [run.id for run in runs]
    if not ids:
        return []
    progress = await batch_run_views.runs_progress(conn, ids)
    batches = await batch_store.provider_batches_of_runs(conn, ids)
    failing = [run_id for run_id in ids if progress[run_id].count(ItemOutcome.FAILED)]
    failures = await batch_run_views.runs_failures(conn, failing) if failing else {}
    return [
        BatchRunView(
            run=run,
            progress=progress[run.id] if batches[run.id] else BatchRunProgress.before_first_step(run),
            batches=batches[run.id],
            failures=failures.get(run.id, []),
        )
        for run in runs
    ]


async def _same_request(conn: AsyncConnection, org_id: str, key: str, digest: str) -> BatchRunView | None:
    """The run an earlier request with this Idempotency-Key created, if it was this same request."""
    earlier = await batch_run_store.run_by_idempotency_key(conn, org_id, key)
    if earlier is None:
        return None
    if earlier.request_hash != digest:
        raise InvalidInput(
            f"Idempotency-Key {key!r} was used for another request (run {earlier.id}); use a new key",
            field="Idempotency-Key",
        )
    (view,) = await views_of(conn, [earlier])
    return view
