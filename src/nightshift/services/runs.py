"""Batch runs as the API sees them: starting one (safely retried), reading it, cancelling it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.callbacks import CallbackRules, check_callback_url
from nightshift.batch.poller_process import ChannelClosed, PollerProcess
from nightshift.batch.steps import RunRequest, cancel_run, create_run
from nightshift.batch.worker import Worker
from nightshift.domain.batches import (
    BatchRun,
    Costs,
    ItemOutcome,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
    RunFailure,
    RunProgress,
    RunStatus,
    StepStatus,
)
from nightshift.domain.messages import Message
from nightshift.domain.usage import Usage
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.store import provider_batches as batch_store
from nightshift.store import run_views
from nightshift.store import runs as run_store
from nightshift.store.pagination import Page

log = logging.getLogger(__name__)

# A run's first step handed to a poller process: how long the request waits for it to be
# submitted (then it answers with the run as it is), and how often it looks.
HAND_OFF_WAIT = 60.0
HAND_OFF_CHECK = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class RunView:
    """A run with its progress, its provider batches (the step timeline) and its failed agents."""

    run: BatchRun
    progress: RunProgress
    batches: list[ProviderBatch]
    failures: list[RunFailure] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentInRun:
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


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRun:
    """What ``POST /v1/messages/batches`` asked for."""

    requests: Sequence[RunRequest]
    callback_url: str | None = None
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = None
    # The request as it came (JSON), to tell a retry from another request under the same key.
    body: dict[str, Any] = field(default_factory=dict)


async def start_run(
    engine: AsyncEngine,
    worker: Worker,
    org_id: str,
    new: NewRun,
    *,
    default_max_steps: int,
    callbacks: CallbackRules,
    hand_off: PollerProcess | None = None,
) -> RunView:
    """Create a run with its first step and submit it; a retry with the same Idempotency-Key and
    body gets the run the first request made.

    With ``hand_off`` (``serve``'s poller process), the poller process writes the run and its
    first step and submits it (``create_handed_off``), and this waits (without work of its own:
    one statement every ``HAND_OFF_CHECK`` seconds) until it has, for ``HAND_OFF_WAIT`` at most:
    loading ten thousand agents, writing their inputs and building and sending their requests
    would hold this process's event loop for seconds, in stretches of 0.1-0.2 s. A poller process
    that is not running (starting again) or ends before it answers leaves the work to this
    process, which leaves the submission to the poller. The answer is the same either way: the
    run, its first step submitted.

    Raises:
        InvalidInput: bad requests, a callback URL on a private address, or an Idempotency-Key
            used for another request.
        NotFound: an agent of another organization, or none.
        Conflict: an agent already stepping.
    """
    digest = hashlib.sha256(orjson.dumps(new.body, option=orjson.OPT_SORT_KEYS)).hexdigest()
    if new.idempotency_key is not None:
        async with engine.connect() as conn:
            earlier = await _same_request(conn, org_id, new.idempotency_key, digest)
        if earlier is not None:
            return earlier
    if new.callback_url is not None:
        await check_callback_url(new.callback_url, allow_private=callbacks.allow_private)
    # The first step is submitted by this request, under a lease name of its own (see ``for_request``),
    # or by a poller.
    worker = worker.for_request()
    message = {
        "org_id": org_id,
        "requests": [r.to_json() for r in new.requests],
        "callback_url": new.callback_url,
        "metadata": new.metadata,
        "idempotency_key": new.idempotency_key,
        "request_hash": digest,
    }
    try:
        run_id: str | None = None
        if hand_off is not None:
            try:
                run_id = _created(await hand_off.create_run(message))
            except ChannelClosed as closed:
                log.warning("%s: this process writes the run", closed)
        if run_id is None:
            async with engine.begin() as conn:
                run, batches = await _create(
                    conn, worker, message, default_max_steps=default_max_steps, inline=hand_off is None
                )
            run_id = run.id
    except (Conflict, IntegrityError):
        # The same request, sent twice at once: the first one made the run (and holds its agents).
        if new.idempotency_key is not None:
            async with engine.connect() as conn:
                earlier = await _same_request(conn, org_id, new.idempotency_key, digest)
            if earlier is not None:
                return earlier
        raise
    if hand_off is None:
        await worker.submit_new(batches)
    else:
        hand_off.wake()  # to submit the first step
        await _submitted(engine, run_id)
    async with engine.connect() as conn:
        return await run_view(conn, org_id, run_id)


async def _create(
    conn: AsyncConnection, worker: Worker, message: dict[str, Any], *, default_max_steps: int, inline: bool
) -> tuple[BatchRun, list[ProviderBatch]]:
    """``create_run`` for a run as ``start_run`` sends it to a poller process; ``inline``: its
    batches leased to ``worker``, which submits them at once, rather than left to a poller."""
    return await create_run(
        conn,
        message["org_id"],
        [RunRequest.from_json(r) for r in message["requests"]],
        callback_url=message["callback_url"],
        default_max_steps=default_max_steps,
        metadata=message["metadata"],
        lease=worker.lease(datetime.now(UTC)) if inline else None,
        endpoints=worker.providers.endpoints(),
        idempotency_key=message["idempotency_key"],
        request_hash=message["request_hash"],
        summary_model=worker.summary_model,
        batch_bytes=worker.batch_bytes,
    )


async def create_handed_off(
    engine: AsyncEngine, worker: Worker, message: dict[str, Any], *, default_max_steps: int
) -> dict[str, Any]:
    """The poller process's side of ``start_run``: write the run and its first step (left due, for
    this process's poller, which ``start_run`` then wakes) and answer with the run's id, or with
    the error to raise (``create_run``'s refusals, when nothing was written)."""
    try:
        async with engine.begin() as conn:
            run, _ = await _create(conn, worker, message, default_max_steps=default_max_steps, inline=False)
    except (InvalidInput, NotFound, Conflict) as refused:
        return {"refused": type(refused).__name__, "message": refused.message, "field": getattr(refused, "field", None)}
    except IntegrityError:  # the same Idempotency-Key, sent twice at once
        return {"refused": "Conflict", "message": "the same request is being handled", "field": None}
    return {"run_id": run.id}


def _created(answer: dict[str, Any]) -> str:
    """The run id in a poller process's answer, or the error it sends back, raised."""
    if "failed" in answer:
        raise RuntimeError(f"the poller process failed to write the run ({answer['failed']}); see its log")
    match answer.get("refused"):
        case None:
            return str(answer["run_id"])
        case "InvalidInput":
            raise InvalidInput(answer["message"], field=answer["field"])
        case "NotFound":
            raise NotFound(answer["message"])
        case _:
            raise Conflict(answer["message"])


async def _submitted(engine: AsyncEngine, run_id: str) -> None:
    """Wait until every provider batch of the run is submitted, or its submission failed once (it is
    tried again later, as an inline submission's would be), for ``HAND_OFF_WAIT`` at most."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(HAND_OFF_WAIT):
            while True:
                async with engine.connect() as conn:
                    batches = await batch_store.provider_batches_of_run(conn, run_id)
                if all(b.status is not ProviderBatchStatus.CREATED or b.failures for b in batches):
                    return
                await asyncio.sleep(HAND_OFF_CHECK)


async def stop_run(engine: AsyncEngine, worker: Worker, org_id: str, run_id: str) -> RunView:
    """Cancel a run and tell the provider about its open batches (see ``batch.steps.cancel_run``)."""
    # Held under a name of this request's own: the poller may be working on these batches, and
    # its release must not free them while this request cancels them (one cancel, not two).
    worker = worker.for_request()
    async with engine.begin() as conn:
        await cancel_run(conn, org_id, run_id, lease=worker.lease(datetime.now(UTC)))
        open_batches = [
            b
            for b in await batch_store.provider_batches_of_run(conn, run_id)
            if b.status is ProviderBatchStatus.CANCELLING
        ]
    for batch in open_batches:
        await worker.cancel(batch)
    async with engine.connect() as conn:
        return await run_view(conn, org_id, run_id)


async def run_view(conn: AsyncConnection, org_id: str, run_id: str) -> RunView:
    """The run, or NotFound (also for another organization's run)."""
    run = await run_store.get_run(conn, org_id, run_id)
    if run is None:
        raise NotFound(f"batch run {run_id} not found")
    (view,) = await _views(conn, [run])
    return view


async def list_run_views(
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    statuses: Sequence[RunStatus] = (),
    has_failures: bool | None = None,
) -> list[RunView]:
    """A page of the organization's runs; ``has_failures``: only those that failed or had an agent
    fail (True), or neither (False)."""
    runs = await run_store.list_runs(conn, org_id, page, statuses=statuses, has_failures=has_failures)
    return await _views(conn, runs)


async def messages_of_run(
    conn: AsyncConnection, org_id: str, run_id: str, page: Page, *, agent_id: str | None = None
) -> list[Message]:
    """A page of the run's messages (inputs, assistant and tool messages, heartbeats)."""
    await _get(conn, org_id, run_id)
    return await run_views.run_messages(conn, run_id, page, agent_id=agent_id)


async def agents_of_run(
    conn: AsyncConnection, org_id: str, run_id: str, *, after: str | None, limit: int
) -> list[AgentInRun]:
    """A page of the run's agents (by agent id), each summed over its items."""
    await _get(conn, org_id, run_id)
    out = []
    for agent in await run_views.run_agent_items(conn, run_id, after=after, limit=limit):
        items = agent.items
        last = items[-1]
        used = [item.usage for item in items if item.usage is not None]
        state = "running" if last.step_status is StepStatus.PAUSED else (last.outcome or ItemOutcome.FINISHED).value
        stopped_by_deletion = agent.agent_deleted and last.outcome is ItemOutcome.CANCELLED
        out.append(
            AgentInRun(
                agent_id=agent.agent_id,
                agent_name=agent.agent_name,
                state=state,
                # Steps answered; a summary of the agent's window is not one (its cost counts).
                steps=sum(1 for i in items if i.request_status is RequestStatus.COMPLETED and not i.step_state.summary),
                step_number=last.step_state.step_number,
                usage=sum(used[1:], used[0]) if used else None,
                cost=sum((item.cost for item in items), Costs()),
                # A step cancelled by the agent's deletion holds the reason: it tells why it stopped.
                error=last.error if last.outcome is ItemOutcome.FAILED or stopped_by_deletion else None,
                agent_deleted=agent.agent_deleted,
            )
        )
    return out


async def _get(conn: AsyncConnection, org_id: str, run_id: str) -> BatchRun:
    run = await run_store.get_run(conn, org_id, run_id)
    if run is None:
        raise NotFound(f"batch run {run_id} not found")
    return run


async def _views(conn: AsyncConnection, runs: Sequence[BatchRun]) -> list[RunView]:
    """The runs with their progress, provider batches and failed agents: two to five statements in all,
    whatever the runs' sizes (see ``run_views.runs_progress``)."""
    ids = [run.id for run in runs]
    if not ids:
        return []
    progress = await run_views.runs_progress(conn, ids)
    batches = await batch_store.provider_batches_of_runs(conn, ids)
    failing = [run_id for run_id in ids if progress[run_id].count(ItemOutcome.FAILED)]
    failures = await run_views.runs_failures(conn, failing) if failing else {}
    return [
        RunView(run=run, progress=progress[run.id], batches=batches[run.id], failures=failures.get(run.id, []))
        for run in runs
    ]


async def _same_request(conn: AsyncConnection, org_id: str, key: str, digest: str) -> RunView | None:
    """The run an earlier request with this Idempotency-Key created, if it was this same request."""
    earlier = await run_store.run_by_idempotency_key(conn, org_id, key)
    if earlier is None:
        return None
    if earlier.request_hash != digest:
        raise InvalidInput(
            f"Idempotency-Key {key!r} was used for another request (run {earlier.id}); use a new key",
            field="Idempotency-Key",
        )
    (view,) = await _views(conn, [earlier])
    return view
