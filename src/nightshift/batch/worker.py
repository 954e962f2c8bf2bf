"""The batch worker: takes leased provider batches through submit -> poll -> resume (or cancel).

Every stage is a state transition written in the same transaction as its effects, checked with
compare-and-set, so re-running a stage after a crash (or in a second process whose lease expired)
finds it done and changes nothing:

* submit (``submission``): build the requests and send them, once; created -> running.
* poll and resume (``application``): store every result when the batch has ended (running ->
  ended), then apply them and write the next step (ended -> applied). The run ends when nothing
  is left open.
* cancel: tell the provider; cancelling -> cancelled.

A worker renews the lease of each batch while it works on it, so a lease outlives its owner only
by ``lease_seconds``: the batches of a worker that died are taken over that soon. A process that
shuts down (``draining``) claims nothing more and gives back every lease it holds at once
(``give_back_leases``), so its batches are taken over without waiting for the leases to expire. A stage that
fails is tried again with a doubling backoff, and given up (its agents failing with the reason)
after ``MAX_FAILURES`` failures in a row, or ``MAX_TRANSIENT_FAILURES`` for errors that may pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch import application, submission
from nightshift.batch.outcomes import failed_result
from nightshift.batch.stages import Stage, stage_done
from nightshift.batch.steps import WrittenBatch
from nightshift.config import Settings
from nightshift.domain.batches import ItemCompletion, ItemOutcome, ProviderBatch, ProviderBatchStatus
from nightshift.errors import ProviderError
from nightshift.metrics import Metrics
from nightshift.pricing import PriceTable
from nightshift.providers.base import ModelProvider
from nightshift.providers.clients import ProviderSet, preload
from nightshift.providers.registry import parse_model
from nightshift.store import batch_summaries
from nightshift.store import items as item_store
from nightshift.store import provider_batches as batch_store
from nightshift.store import runs as run_store
from nightshift.tools.metered import MeteredSandbox
from nightshift.tools.sandbox import Sandbox, build_sandbox

log = logging.getLogger(__name__)

# A failed stage is tried again after ``Worker.error_backoff``, doubled with each failure up to this.
MAX_BACKOFF = timedelta(minutes=15)
# A stage that fails this many times in a row is given up (the batch's agents fail with the
# reason): an error that will not go away (a bug, a refusal) after MAX_FAILURES, one that may
# (the provider unreachable or overloaded) after MAX_TRANSIENT_FAILURES, about a day of backoff.
MAX_FAILURES = 5
MAX_TRANSIENT_FAILURES = 100
# A lease lasts this many poll intervals (600 s at the default 30 s), and at least MIN_LEASE_SECONDS;
# it is renewed every third of that while its owner works on the batch.
LEASE_POLL_INTERVALS = 20
MIN_LEASE_SECONDS = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """What the worker needs, built once by the server (or ``nightshift poll``)."""

    engine: AsyncEngine
    providers: ProviderSet
    sandbox: Sandbox
    owner: str
    # What this process did (stage durations, provider errors, tokens and cost), for ``GET /metrics``.
    metrics: Metrics
    poll_interval: float
    prices: PriceTable = field(default_factory=PriceTable)
    lease_seconds: float = 600.0
    # The first wait before a failed callback is sent again (see ``batch/callbacks.py``).
    callback_retry_delay: timedelta = timedelta(seconds=2)
    # Whether callbacks may go to loopback and private addresses (see ``batch/callbacks.py``).
    callback_allow_private: bool = False
    # The first wait before a failed stage (the provider unreachable, say) is tried again.
    error_backoff: timedelta = timedelta(seconds=30)
    # Set when the process shuts down: claim nothing more, and start no other claimed batch.
    # Shared with the workers of ``for_request``.
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    # The model that summarizes agents' evicted messages (provider/model); None: each agent's own.
    summary_model: str | None = None
    # The most bytes of requests in one provider batch, estimated when a step is written and real
    # when it is sent (``Settings.batch_bytes``); None: the provider's limit.
    batch_bytes: int | None = None

    def lease(self, now: datetime) -> tuple[str, datetime]:
        """A lease on batches this worker creates and submits at once, so no other poller takes them."""
        return self.owner, now + timedelta(seconds=self.lease_seconds)

    def for_request(self) -> Worker:
        """This worker under a lease name of its own, for work done outside the poller (an API request).

        The poller of this process holds its batches under ``owner``: a batch a request holds
        (one it creates, or cancels while the poller works on it) must not be released, renewed
        or submitted by the poller as if it held it.
        """
        return replace(self, owner=worker_id())

    async def run_once(self, *, limit: int = 50) -> int:
        """Claim the provider batches that are due and take each one stage further (or to the end).

        Returns how many batches were handled. Once ``draining`` is set it claims nothing, and the
        batches it claimed but did not start stay leased until ``give_back_leases``.
        """
        if self.draining.is_set():
            return 0
        async with self.engine.begin() as conn:
            claimed = await batch_store.claim_due(
                conn,
                self.owner,
                datetime.now(UTC),
                lease_seconds=self.lease_seconds,
                limit=limit,
                endpoints=self.providers.endpoints(),
            )
        for handled, batch in enumerate(claimed):
            if self.draining.is_set():
                return handled
            try:
                async with self.holding(batch.id):
                    await self._advance(batch)
            except Exception as exc:
                # Never mark anything done on an unexpected error: try again, and give up in the end.
                log.exception("provider batch %s failed to advance", batch.id)
                await self.stage_failed(batch, f"{type(exc).__name__}: {exc}", retryable=False)
        return len(claimed)

    async def _advance(self, batch: ProviderBatch) -> None:
        if batch.status is ProviderBatchStatus.CREATED:
            await self.submit(batch)  # polled when it is next due
            return
        if batch.status is ProviderBatchStatus.RUNNING:
            batch = await application.poll(self, batch)
        if batch.status is ProviderBatchStatus.ENDED:
            await self.submit_new(await application.resume(self, batch))
        elif batch.status is ProviderBatchStatus.CANCELLING:
            await self.cancel(batch)

    @asynccontextmanager
    async def holding(self, batch_id: str) -> AsyncIterator[None]:
        """Renew this worker's lease on a batch while the block runs (a stage may outlast one lease)."""

        done = asyncio.Event()

        async def renew() -> None:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.lease_seconds / 3):
                        await done.wait()
                if done.is_set():
                    return
                expires = datetime.now(UTC) + timedelta(seconds=self.lease_seconds)
                try:
                    async with self.engine.begin() as conn:
                        if not await batch_store.renew_lease(conn, batch_id, self.owner, expires):
                            return  # released (or taken over): nothing left to renew
                except Exception:
                    log.warning("renewing the lease on %s failed; trying again", batch_id, exc_info=True)

        # Stopped with an event rather than cancelled, so that a renewal is never cut mid-transaction.
        renewer = asyncio.create_task(renew(), name=f"lease-{batch_id}")
        try:
            yield
        finally:
            done.set()
            await renewer

    async def release(self, batch: ProviderBatch, *, delay: timedelta) -> None:
        """Give up this worker's lease on ``batch``; it is due again after ``delay``."""
        async with self.engine.begin() as conn:
            await batch_store.release(conn, batch.id, self.owner, next_poll_at=datetime.now(UTC) + delay)

    async def give_back_leases(self) -> int:
        """Release every lease this process holds (its poller's and its requests'), due at once.

        For a process about to exit: another process takes its batches over at its next poll. A
        stage still running here is redone there; its compare-and-set transitions keep that safe.
        Returns how many leases were given back.
        """
        async with self.engine.begin() as conn:
            return await batch_store.release_all_of(conn, process_prefix(), datetime.now(UTC))

    async def record_failure(self, batch: ProviderBatch, *, failures: int, error: str, delay: timedelta) -> None:
        """Give up the lease on a batch whose stage failed; it is tried again after ``delay``."""
        async with self.engine.begin() as conn:
            await batch_store.record_failure(
                conn, batch.id, self.owner, failures=failures, error=error, next_poll_at=datetime.now(UTC) + delay
            )

    async def stage_failed(self, batch: ProviderBatch, reason: str, *, retryable: bool) -> None:
        """Count a failure of the batch's current stage: try it again later, or give it up."""
        async with self.engine.connect() as conn:
            current = await batch_store.get_provider_batch(conn, batch.id)
        if current is None:
            return
        failures = current.failures + 1
        if failures < (MAX_TRANSIENT_FAILURES if retryable else MAX_FAILURES):
            delay = min(self.error_backoff * 2 ** (failures - 1), MAX_BACKOFF)
            await self.record_failure(current, failures=failures, error=reason, delay=delay)
            return
        log.error("provider batch %s failed %d times in a row; giving it up: %s", batch.id, failures, reason)
        await self._give_up(current, f"gave up after {failures} failures in a row: {reason}")

    async def _give_up(self, batch: ProviderBatch, reason: str) -> None:
        """End a batch whose stage keeps failing: its agents fail with ``reason``, the run goes on."""
        now = datetime.now(UTC)
        if batch.status is ProviderBatchStatus.CANCELLING:
            async with self.engine.begin() as conn:
                await batch_store.mark_cancelled(conn, batch.id, now, only_from=(batch.status,), error=reason)
                await batch_store.release(conn, batch.id, self.owner, next_poll_at=None)
            return
        if batch.status is ProviderBatchStatus.RUNNING and batch.provider_batch_id is not None:
            with contextlib.suppress(ProviderError):  # best effort: nothing more of it will be read
                await self.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
        if batch.status in (ProviderBatchStatus.CREATED, ProviderBatchStatus.RUNNING):
            async with self.engine.connect() as conn:
                items = await item_store.items_of(conn, batch.id)
            results = [failed_result(item.id, reason) for item in items]
            await submission.end_batch(self, batch, results, only_from=batch.status, error=reason)
            return
        if batch.status is ProviderBatchStatus.ENDED:
            async with self.engine.begin() as conn:
                await run_store.lock_run(conn, batch.batch_run_id)
                if await batch_store.mark_applied(conn, batch.id, now, error=reason):
                    items = await item_store.items_of(conn, batch.id)
                    failed = [ItemCompletion(item_id=i.id, outcome=ItemOutcome.FAILED, error=reason) for i in items]
                    await item_store.complete_items(conn, failed, now)
                    await batch_summaries.record_summaries(conn, [batch.id])
                    await application.end_run_if_done(conn, batch.batch_run_id, now)
                await batch_store.release(conn, batch.id, self.owner, next_poll_at=None)

    async def submit(self, batch: ProviderBatch, written: WrittenBatch | None = None) -> ProviderBatch:
        """Send a created provider batch to its provider, once (see ``batch/submission.py``)."""
        return await submission.submit(self, batch, written)

    async def submit_new(self, batches: Sequence[ProviderBatch | WrittenBatch]) -> None:
        """Submit batches this worker just wrote (and holds the lease of); the poller retries failures."""
        for new in batches:
            batch, written = (new.batch, new) if isinstance(new, WrittenBatch) else (new, None)
            try:
                async with self.holding(batch.id):
                    await self.submit(batch, written)
            except Exception:
                log.exception("submitting %s failed; the poller will retry", batch.id)

    async def cancel(self, batch: ProviderBatch) -> None:
        """Tell the provider to cancel a batch of a cancelled run; its results are never applied."""
        started = time.monotonic()
        if batch.provider_batch_id is not None:
            try:
                await self.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
            except ProviderError as exc:
                if exc.retryable:
                    await self.stage_failed(batch, exc.message, retryable=True)
                    return
                log.warning("cancelling %s at the provider failed: %s", batch.id, exc.message)
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            cancelled = await batch_store.mark_cancelled(
                conn, batch.id, now, only_from=(ProviderBatchStatus.CANCELLING,)
            )
            await batch_store.release(conn, batch.id, self.owner, next_poll_at=None)
            agents = await item_store.count_items(conn, batch.id) if cancelled else 0
        if cancelled:
            stage_done(Stage.CANCEL, batch, agents=agents, started=started, metrics=self.metrics)


def worker_id() -> str:
    """A name for a lease owner of this process: host, pid and a random part."""
    return f"{process_prefix()}{uuid.uuid4().hex[:8]}"


def process_prefix() -> str:
    """How every lease owner of this process begins: ``host:pid:``."""
    return f"{socket.gethostname()}:{os.getpid()}:"


def checked_summary_model(handle: str | None) -> str | None:
    """``NIGHTSHIFT_SUMMARY_MODEL`` as given, once its provider is known to exist.

    Raises:
        InvalidInput: Not ``provider/model-name``, or an unknown provider.
    """
    if handle is not None:
        parse_model(handle)
    return handle


# How many collections of the middle generation CPython's cycle collector makes before a full one
# while a worker runs (its default is 10; see ``rare_full_collections``).
FULL_COLLECTION_AFTER = 1_000


@contextmanager
def rare_full_collections() -> Iterator[None]:
    """Let CPython's cycle collector scan every object a hundred times less often.

    A stage builds a working set of hundreds of thousands of objects (a batch's agents, their
    messages, requests and results) that all survive the young generations, and a full collection
    scans all of them: by default one came every ten young collections, about forty in a two-step
    run of 10,000 agents, for 15% of the CPU of applying a step (``make bench``). Nearly nothing
    the worker makes is cyclic garbage (reference counting frees it) and young cycles are still
    collected as before, so this costs no memory there. The thresholds are the process's: they are
    put back as they were when the block ends.
    """
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, max(full, FULL_COLLECTION_AFTER))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, full)


@asynccontextmanager
async def running_worker(
    settings: Settings, engine: AsyncEngine, *, providers: Mapping[str, ModelProvider] | None = None
) -> AsyncIterator[Worker]:
    """A worker with its tool sandbox, provider clients and metrics, all closed when the block ends.

    ``providers`` replaces the real provider of some names (``ProviderSet``'s ``overrides``).
    """
    metrics = Metrics()
    with rare_full_collections():
        async with (
            build_sandbox(settings) as sandbox,
            ProviderSet(metrics=metrics, overrides=providers) as provider_set,
        ):
            # The SDKs take seconds to import: in a thread, while the server already answers.
            preloading = asyncio.create_task(asyncio.to_thread(preload), name="preload-providers")
            yield Worker(
                engine=engine,
                providers=provider_set,
                sandbox=MeteredSandbox(sandbox, metrics),
                owner=worker_id(),
                metrics=metrics,
                poll_interval=settings.poll_interval_seconds,
                lease_seconds=settings.lease_seconds
                or max(MIN_LEASE_SECONDS, LEASE_POLL_INTERVALS * settings.poll_interval_seconds),
                callback_retry_delay=timedelta(seconds=settings.callback_retry_seconds),
                callback_allow_private=settings.callback_allow_private,
                error_backoff=timedelta(seconds=settings.error_backoff_seconds),
                prices=PriceTable(settings.prices),
                summary_model=checked_summary_model(settings.summary_model),
                batch_bytes=settings.batch_bytes,
            )
            await preloading
