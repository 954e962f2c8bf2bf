"""Submitting a created provider batch to its provider, once.

The intent is recorded (committed) before the provider is called. A worker that finds an intent
but no provider id (the last one died between the provider accepting the batch and its recording
it) looks for the batch at the provider first and adopts it instead of sending it again:

* found by the tag the batch carries (OpenAI keeps metadata): every batch found is a copy of it;
  the first is adopted, the others cancelled at once and listed as the batch's duplicates;
* found by request count (Anthropic keeps none): another batch of the same size may be in
  flight at the same moment, so a candidate is adopted only once it has ended with exactly the
  batch's custom ids. While one still runs the submission waits; if none is the batch, it is sent.

A submission that lost a race (another worker submitted or adopted the batch meanwhile) cancels
its own copy. An agent whose request cannot be built fails alone; a batch the provider refuses
for good ends at once with every item failed.

A batch is cut when its step is written, on an estimate of its requests' sizes, which can come
out low (see ``domain.batch_split``). A batch whose body, once serialised, is over the limit
(the provider's, or the lower ``StageParts.batch_bytes``) is cut again by the requests' real sizes,
before anything of it is sent: it keeps the first part, and new provider batches of the same
run, step and provider take the others, written with the items they take over in one
transaction and leased to this worker, which sends them at once from the requests it holds (the
stage returns them to the worker's loop, which sends each as a ``Prepared`` batch).
A crash after that transaction leaves ordinary created batches, which the poller submits when
the lease expires; before it, nothing has changed. A request over the provider's limit on its
own is in a part alone, and fails alone.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from nightshift.batch.leases import Leases
from nightshift.batch.outcomes import failed_result
from nightshift.batch.stages import Outcome, Prepared, Stage, StageOutcome, StageParts, stage_done
from nightshift.batch.steps import WrittenBatch
from nightshift.domain.batch_split import split_by_size
from nightshift.domain.batches import (
    BatchItem,
    BatchRunStatus,
    ItemResult,
    PollSnapshot,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
)
from nightshift.domain.caching import CachePolicy
from nightshift.domain.messages import Message
from nightshift.errors import ProviderError
from nightshift.ids import new_id
from nightshift.providers.base import BatchState, ModelError, ModelProvider
from nightshift.providers.registry import provider_info
from nightshift.providers.spool import BatchTooLarge
from nightshift.runtime.caching import in_batch
from nightshift.runtime.context import encoded_requests
from nightshift.store import agents as agent_store
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import batch_summaries, submits
from nightshift.store import items as item_store
from nightshift.store import provider_batches as batch_store

log = logging.getLogger(__name__)

# Submissions refused for a transient reason are tried this often before the agents fail.
SUBMIT_ATTEMPTS = 5
# How long before its recorded intent a batch the provider accepted may seem to have been created
# (the provider's clock and ours differ).
ADOPT_WINDOW = timedelta(minutes=5)


class _Wait:
    """Whether an earlier attempt got a batch to the provider cannot be told yet."""


WAIT = _Wait()


async def submit(
    parts: StageParts, leases: Leases, batch: ProviderBatch, written: WrittenBatch | None = None
) -> StageOutcome:
    """Send a created provider batch to its provider, once; returns what happened.

    ``written``: the batch as this worker just wrote it (its items, agents and the messages it
    had in hand), read from the database otherwise; its agents that changed since are read again
    all the same, with their whole windows.
    """
    started = time.monotonic()
    turnaround = None
    if parts.cache_policy is CachePolicy.AUTO and provider_info(batch.provider).cache_rates is not None:
        turnaround = (await parts.poll_schedule.turnarounds(parts.clock.now())).get(batch.provider, batch.model)
    async with parts.engine.connect() as conn:
        known: dict[str, Message] = {}
        if written is None:
            items = await item_store.items_of(conn, batch.id)
            agents = await parts.load_agents(conn, batch.organization_id, [i.agent_id for i in items])
        else:
            items = written.items
            agents = await agent_store.reload_changed(conn, batch.organization_id, written.agents)
            # A system message is rewritten only with its agent's row (whose change is seen above).
            unchanged = {i for i, agent in agents.items() if agent is written.agents.get(i)}
            known = {i: m for i, m in written.messages.items() if m.agent_id in unchanged}
        if parts.agents is not None:
            # As stored after their step's write, with the system messages it had in hand: the next step starts there.
            parts.agents.keep(agents.values(), known)
        try:
            provider = parts.providers.get(batch.provider)
        except ProviderError as exc:
            return await _unsent(parts, leases, batch, items, exc)
        present = [i for i in items if i.agent_id in agents]
        requests, problems = await encoded_requests(
            conn,
            [agents[i.agent_id] for i in present],
            {i.agent_id: i.step_state for i in present},
            in_batch(parts.cache_policy, turnaround),
            provider.encode_request,
            known=known,
            cache=parts.messages,
        )
    refused = [
        failed_result(i.id, f"the request could not be built: {problems[i.agent_id]}")
        for i in present
        if i.agent_id in problems
    ]
    if not requests:
        error = "no request of this batch could be built"
        ended = await end_batch(parts, leases, batch, refused, only_from=ProviderBatchStatus.CREATED, error=error)
        return StageOutcome(outcome=Outcome.ENDED, batch=ended)
    prepared = Prepared(batch=batch, items=items, requests=requests, refused=refused)
    return await _send(parts, leases, prepared, started=started)


async def send_prepared(parts: StageParts, leases: Leases, prepared: Prepared) -> StageOutcome:
    """Send a part of a batch cut by size (see ``_split``), from the requests built for it: no
    copy of it can be at the provider yet."""
    return await _send(parts, leases, prepared, started=time.monotonic(), look_first=False)


async def _send(
    parts: StageParts, leases: Leases, built: Prepared, *, started: float, look_first: bool = True
) -> StageOutcome:
    """Send the built requests of a batch, once (found at the provider first unless ``look_first``
    is off: the caller knows no copy is there)."""
    batch = built.batch
    try:
        provider = parts.providers.get(batch.provider)
        adopted = await _adopt(parts, batch, provider, set(built.requests)) if look_first else None
        if isinstance(adopted, _Wait):
            return StageOutcome(outcome=Outcome.WAITING, batch=batch, due_in=parts.poll_interval)
        provider_batch_id = adopted
        if provider_batch_id is None:
            async with parts.engine.begin() as conn:
                if not await submits.record_submit_intent(conn, batch.id, leases.owner, parts.clock.now()):
                    current = await batch_store.get_provider_batch(conn, batch.id)
                    assert current is not None
                    return StageOutcome(outcome=Outcome.LEFT, batch=current)  # cancelled or taken over meanwhile
            provider_batch_id = await provider.submit_batch(
                built.requests, model=batch.model, tag=batch.id, max_bytes=parts.batch_bytes
            )
    except BatchTooLarge as exc:
        return await _split(parts, leases, built, exc, started=started)
    except ProviderError as exc:
        return await _unsent(parts, leases, batch, built.items, exc)
    current = await _submitted(parts, leases, batch, provider_batch_id, built.refused)
    running = current.status is ProviderBatchStatus.RUNNING
    if running and current.provider_batch_id == provider_batch_id:
        stage_done(Stage.SUBMIT, current, agents=len(built.requests), started=started, metrics=parts.metrics)
    return StageOutcome(
        outcome=Outcome.SUBMITTED if running else Outcome.LEFT,
        batch=current,
        due_in=parts.poll_schedule.first_gap if running else timedelta(0),
    )


async def _split(
    parts: StageParts, leases: Leases, built: Prepared, exc: BatchTooLarge, *, started: float
) -> StageOutcome:
    """Cut a batch whose body is over the limit into parts that fit, by the requests' real sizes,
    and send the first (see the module docstring); the others are the outcome's batches to submit."""
    batch = built.batch
    ids = list(built.requests)
    cuts = split_by_size([exc.sizes[i] for i in ids], max_count=len(ids), max_bytes=exc.room)
    if len(cuts) < 2:  # not raised for fewer than two requests over the room; never loop on it
        ended = await _refused(parts, leases, batch, built.items, exc)
        return StageOutcome(outcome=Outcome.ENDED, batch=ended)
    now = parts.clock.now()
    pieces = [
        ProviderBatch(
            id=new_id("llm_batch"),
            organization_id=batch.organization_id,
            batch_run_id=batch.batch_run_id,
            provider=batch.provider,
            endpoint=batch.endpoint,
            step_number=batch.step_number,
            status=ProviderBatchStatus.CREATED,
            deadline_at=batch.deadline_at,
            model=batch.model,
            created_at=now,
            updated_at=now,
        )
        for _ in cuts[1:]
    ]
    by_agent = {item.agent_id: item for item in built.items}
    async with parts.engine.begin() as conn:
        await batch_run_store.lock_run(conn, batch.batch_run_id)
        if not await submits.hold_created(conn, batch.id, leases.owner, now):
            current = await batch_store.get_provider_batch(conn, batch.id)
            assert current is not None
            return StageOutcome(outcome=Outcome.LEFT, batch=current)  # cancelled or taken over meanwhile
        counts = {part.id: len(cut) for part, cut in zip(pieces, cuts[1:], strict=True)}
        await batch_store.insert_provider_batches(conn, pieces, items=counts, lease=leases.lease())
        for part, cut in zip(pieces, cuts[1:], strict=True):
            await item_store.move_items(conn, [by_agent[ids[k]].id for k in cut], part.id, now)
        await batch_summaries.record_new_items(conn, {batch.id: len(cuts[0])})  # what it keeps
    log.info(
        "provider batch %s holds %d bytes of requests, over the %d a batch may: cut into %d parts by size",
        batch.id,
        sum(exc.sizes.values()),
        exc.room,
        len(cuts),
    )
    moved = {ids[k] for cut in cuts[1:] for k in cut}
    first = Prepared(
        batch=batch,
        items=[i for i in built.items if i.agent_id not in moved],
        requests=built.requests.part(ids[k] for k in cuts[0]),
        refused=built.refused,
    )
    rest = [
        Prepared(
            batch=part,
            items=[by_agent[ids[k]] for k in cut],
            requests=built.requests.part(ids[k] for k in cut),
            refused=(),
        )
        for part, cut in zip(pieces, cuts[1:], strict=True)
    ]
    sent = await _send(parts, leases, first, started=started, look_first=False)
    return replace(sent, next_batches=rest)


async def end_batch(
    parts: StageParts,
    leases: Leases,
    batch: ProviderBatch,
    results: Sequence[ItemResult],
    *,
    only_from: ProviderBatchStatus,
    error: str | None,
    snapshot: PollSnapshot | None = None,
    release: bool = True,
) -> ProviderBatch:
    """Move a batch to ended with every item's result, in one transaction (once).

    With ``release`` the lease is given up and the batch is due at once, to be applied; without,
    the caller applies it now. A batch that never reached its provider (or is given up) ends so
    too, its results saying why its agents stop.
    """
    now = parts.clock.now()
    async with parts.engine.begin() as conn:
        if await batch_store.mark_ended(conn, batch.id, now, only_from=only_from, snapshot=snapshot, error=error):
            await item_store.store_results(conn, results, now)
            await batch_summaries.record_usage(conn, batch.id)  # the views count its items alone until applied
        if release:
            await batch_store.release(conn, batch.id, leases.owner, next_poll_at=now)
        current = await batch_store.get_provider_batch(conn, batch.id)
    assert current is not None
    return current


async def _unsent(
    parts: StageParts, leases: Leases, batch: ProviderBatch, items: Sequence[BatchItem], exc: ProviderError
) -> StageOutcome:
    """The batch did not reach the provider: it is sent again later when the cause may pass, else
    it ends with every agent failed."""
    if exc.retryable and batch.failures + 1 < SUBMIT_ATTEMPTS:
        log.warning("submitting %s failed (%s); retrying", batch.id, exc.message)
        return StageOutcome(outcome=Outcome.RESUBMIT, batch=batch, reason=exc.message, retryable=True)
    ended = await _refused(parts, leases, batch, items, exc)
    return StageOutcome(outcome=Outcome.ENDED, batch=ended)


async def _refused(
    parts: StageParts, leases: Leases, batch: ProviderBatch, items: Sequence[BatchItem], exc: ProviderError
) -> ProviderBatch:
    """The provider refused the batch: every agent of it fails this step (resume records why)."""
    error = ModelError(type=exc.kind, message=exc.message)
    results = [failed_result(item.id, f"{exc.kind}: {exc.message}", error) for item in items]
    return await end_batch(parts, leases, batch, results, only_from=ProviderBatchStatus.CREATED, error=exc.message)


async def _adopt(
    parts: StageParts, batch: ProviderBatch, provider: ModelProvider, custom_ids: set[str]
) -> str | _Wait | None:
    """The provider's id of this batch if an earlier attempt got it there; None to submit it;
    ``WAIT`` when that cannot be told yet (see the module docstring)."""
    if batch.submit_started_at is None:
        return None  # never sent
    found = await provider.find_batches(
        batch.id, created_after=batch.submit_started_at - ADOPT_WINDOW, requests=len(custom_ids)
    )
    async with parts.engine.connect() as conn:
        known = await batch_store.known_provider_ids(conn, batch.provider, found.ids)
    candidates = [provider_id for provider_id in found.ids if provider_id not in known]
    if not candidates:
        return None
    if found.tagged:
        adopted, *copies = candidates
        await _cancel_copies(parts, batch, provider, copies)
    else:
        ended = await _ended_with(provider, candidates, custom_ids)
        if not isinstance(ended, str):
            return ended
        adopted = ended
    log.warning("provider batch %s was accepted by %s before a crash: adopting %s", batch.id, batch.provider, adopted)
    return adopted


async def _ended_with(provider: ModelProvider, candidates: Sequence[str], custom_ids: set[str]) -> str | _Wait | None:
    """The first candidate that has ended with exactly these custom ids; ``WAIT`` while one of
    them is still running (it may be the one); None when none of them is."""
    running = False
    for candidate in candidates:
        if (await provider.retrieve_batch(candidate)).state is not BatchState.ENDED:
            running = True
            continue
        async with contextlib.aclosing(provider.batch_results(candidate)) as results:
            seen = {custom_id async for custom_id, _ in results}
        if seen == custom_ids:
            return candidate
    return WAIT if running else None


async def _cancel_copies(
    parts: StageParts, batch: ProviderBatch, provider: ModelProvider, copies: Sequence[str]
) -> None:
    for copy in copies:
        log.warning("cancelling %s, a second copy of provider batch %s", copy, batch.id)
        with contextlib.suppress(ProviderError):  # it is recorded either way; a finished copy cannot be
            await provider.cancel_batch(copy)
    async with parts.engine.begin() as conn:
        await submits.add_duplicates(conn, batch.id, copies)


async def _submitted(
    parts: StageParts, leases: Leases, batch: ProviderBatch, provider_batch_id: str, refused: Sequence[ItemResult]
) -> ProviderBatch:
    """Record that the provider holds the batch; the agents that could not go in fail."""
    now = parts.clock.now()
    duplicate = False
    async with parts.engine.begin() as conn:
        await batch_run_store.lock_run(conn, batch.batch_run_id)
        moved = await batch_store.mark_running(
            conn, batch.id, provider_batch_id, now, next_poll_at=now + parts.poll_schedule.first_gap
        )
        current = await batch_store.get_provider_batch(conn, batch.id)
        assert current is not None
        if moved:
            await item_store.store_results(conn, refused, now)
            await item_store.set_items_request_status(conn, batch.id, RequestStatus.RUNNING, now)
            await batch_run_store.set_run_status(
                conn, batch.batch_run_id, BatchRunStatus.RUNNING, now, only_from=(BatchRunStatus.CREATED,)
            )
        elif current.status is ProviderBatchStatus.CANCELLED and current.provider_batch_id is None:
            # The run was cancelled while we submitted: remember the id so it is cancelled there too.
            await batch_store.mark_cancelling(
                conn, batch.id, now, only_from=(ProviderBatchStatus.CANCELLED,), provider_batch_id=provider_batch_id
            )
            current = replace(current, status=ProviderBatchStatus.CANCELLING)
        else:
            duplicate = current.provider_batch_id != provider_batch_id
    if duplicate:
        # Another worker submitted (or adopted) it meanwhile: ours is a second copy.
        await _cancel_copies(parts, batch, parts.providers.get(batch.provider), [provider_batch_id])
    return current
