"""Taking a batch's stragglers over for its run's deadline (see ``domain/deadlines.py``).

The poll that decides it cancels the batch at its provider (``begin``); the poll that sees it end
stores every result, the requests it never ran as cancelled (or expired). Then ``take_over``
builds those requests again (the same agents, the same step state: the same request) and sends
them, several at a time; each answer (or error) is stored on its item as it comes (each
transaction takes what came while the last one was written), with the way it came (``Route``): a
model that has a tier billed at batch prices (OpenAI's flex) goes through it. Then the batch is
applied as any other, each answer priced by its route.

A crash in the middle loses nothing: the answers stored are kept, and the stage, run again on the
same ended batch, sends only the requests still without one. A request whose answer was lost with
the crash is sent (and billed) again, as a tool call is run again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Mapping

from nightshift.batch.outcomes import failed_result
from nightshift.batch.stages import StageParts
from nightshift.domain.answers import ModelError, OutcomeStatus, Route, StoredResult
from nightshift.domain.batches import BatchItem, ItemResult, ProviderBatch, RequestStatus
from nightshift.domain.deadlines import Takeover
from nightshift.errors import ProviderError, ProviderErrorKind
from nightshift.providers.base import ModelProvider, ModelRequest
from nightshift.providers.registry import provider_info
from nightshift.runtime.caching import IN_CALL
from nightshift.runtime.context import build_requests
from nightshift.store import agents as agent_store
from nightshift.store import items as item_store
from nightshift.store import provider_batches as batch_store

log = logging.getLogger(__name__)

# Requests of one take-over in flight at once.
CONCURRENCY = 16


async def begin(
    parts: StageParts, batch: ProviderBatch, reason: Takeover, request_counts: Mapping[str, int]
) -> str | None:
    """Cancel a running batch at its provider for its take-over (the poll records ``takeover_at``);
    returns why when the provider could not be told for now (the poll is failed and tried again)."""
    assert batch.provider_batch_id is not None
    try:
        await parts.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
    except ProviderError as exc:
        if exc.retryable:
            return exc.message
        # Cancelled already (a take-over cut short by a crash), or ended meanwhile: its next poll
        # reads what it holds.
        log.warning("cancelling %s for its take-over failed: %s", batch.id, exc.message)
    log.info(
        "run %s step %d: taking over provider batch %s (%s) with %d of %d requests open (%s)",
        batch.batch_run_id,
        batch.step_number,
        batch.id,
        batch.provider,
        request_counts.get("processing", 0),
        sum(request_counts.values()),
        reason.value,
        extra={"run_id": batch.batch_run_id, "batch_id": batch.id, "takeover": reason.value},
    )
    return None


async def take_over(parts: StageParts, batch: ProviderBatch) -> int:
    """Send the requests an ended batch never ran through the normal API and store what each got;
    returns how many were sent (none once they all have an answer). The caller holds the
    batch's lease throughout; the stage writes no transition of its own."""
    started = time.monotonic()
    async with parts.engine.connect() as conn:
        items = await item_store.unanswered_items(conn, batch.id)
        if not items:
            return 0
        agents = await agent_store.load_agents(conn, batch.organization_id, [i.agent_id for i in items])
        states = {i.agent_id: i.step_state for i in items if i.agent_id in agents}
        requests, problems = await build_requests(conn, [agents[a] for a in states], states, IN_CALL)
    provider = parts.providers.get(batch.provider)
    flex_models = provider_info(batch.provider).flex_models
    answers: asyncio.Queue[ItemResult | None] = asyncio.Queue()
    for item in items:
        if item.agent_id not in requests:
            reason = problems.get(item.agent_id, "the agent was deleted")
            answers.put_nowait(failed_result(item.id, f"the request could not be built: {reason}"))

    async def send(item: BatchItem, request: ModelRequest) -> None:
        async with gate:
            answers.put_nowait(await _answer(provider, item, request, flex=request.model.startswith(flex_models)))

    gate = asyncio.Semaphore(CONCURRENCY)
    writing = asyncio.create_task(_store_as_they_come(parts, batch, answers))
    try:
        async with asyncio.TaskGroup() as sending:
            for item in items:
                if item.agent_id in requests:
                    sending.create_task(send(item, requests[item.agent_id]))
    finally:
        answers.put_nowait(None)  # what came is stored, even when a send failed
        await writing
    log.info(
        "run %s step %d: took over %d requests of provider batch %s (%s) in %d ms",
        batch.batch_run_id,
        batch.step_number,
        len(items),
        batch.id,
        batch.provider,
        round((time.monotonic() - started) * 1000),
        extra={"run_id": batch.batch_run_id, "batch_id": batch.id, "taken_over": len(items)},
    )
    return len(items)


async def _store_as_they_come(
    parts: StageParts, batch: ProviderBatch, answers: asyncio.Queue[ItemResult | None]
) -> None:
    """Store the answers as they come, each store taking all that came while the last one ran,
    until ``None``."""
    while True:
        came = [await answers.get()]
        while not answers.empty():
            came.append(answers.get_nowait())
        results = [r for r in came if r is not None]
        if results:
            async with parts.engine.begin() as conn:
                await item_store.store_results(conn, results, parts.clock.now())
                routes = Counter(r.result.route for r in results if r.result.route is not Route.BATCH)
                await batch_store.count_taken_over(conn, batch.id, routes.total())
            for route, count in routes.items():
                parts.metrics.taken_over(batch.provider, route.value, count)
        if None in came:
            return


async def _answer(provider: ModelProvider, item: BatchItem, request: ModelRequest, *, flex: bool) -> ItemResult:
    """One request through the normal API (its flex tier first where the model has one, the
    default tier when flex has no room), as its item stores it."""
    route = Route.NORMAL
    try:
        if flex:
            try:
                response = await provider.complete(dataclasses.replace(request, flex=True))
                route = Route.FLEX
            except ProviderError as exc:
                if exc.kind is not ProviderErrorKind.RATE_LIMIT:
                    raise
                response = await provider.complete(request)
        else:
            response = await provider.complete(request)
    except ProviderError as exc:
        reason = f"{exc.kind}: {exc.message} (taken over for the deadline)"
        failed = failed_result(item.id, reason, ModelError(type=exc.kind, message=exc.message))
        return dataclasses.replace(failed, result=dataclasses.replace(failed.result, route=Route.NORMAL))
    return ItemResult(
        item_id=item.id,
        request_status=RequestStatus.COMPLETED,
        result=StoredResult(status=OutcomeStatus.SUCCEEDED, response=response, route=route),
        usage=response.usage,
    )
