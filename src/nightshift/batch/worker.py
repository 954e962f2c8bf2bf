"""The batch worker's loop: takes leased provider batches through submit -> poll -> resume (or cancel).

Every stage is a state transition written in the same transaction as its effects, checked with
compare-and-set, so re-running a stage after a crash (or in a second process whose lease expired)
finds it done and changes nothing:

* submit (``submission``): build the requests and send them, once; created -> running.
* poll and resume (``application``): store every result when the batch has ended (running ->
  ended), then apply them and write the next step (ended -> applied). The run ends when nothing
  is left open. A batch cancelled for its run's deadline sends what it never ran through the
  normal API before it is applied (``takeover``).
* cancel: tell the provider; cancelling -> cancelled.

Each stage returns what happened (``stages.StageOutcome``) and the loop acts on it: it gives the
lease back (``batch/leases.py``) with the batch due again when it should be, submits the batches
the stage wrote, or counts a failure. A stage that fails is tried again with a doubling backoff,
and given up (its agents failing with the reason) after ``MAX_FAILURES`` failures in a row, or
``MAX_TRANSIENT_FAILURES`` for errors that may pass. A process that shuts down (``draining``)
claims nothing more and gives back every lease it holds at once (``Leases.give_back_all``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch import application, run_queue, sleeptime, submission, takeover
from nightshift.batch.leases import Leases, worker_id
from nightshift.batch.outcomes import failed_result
from nightshift.batch.polling import PollSchedule
from nightshift.batch.sleeptime import SleeptimeRules
from nightshift.batch.stages import Outcome, Prepared, Stage, StageOutcome, StageParts, stage_done
from nightshift.batch.steps import WrittenBatch
from nightshift.domain.batches import ItemCompletion, ItemOutcome, ProviderBatch, ProviderBatchStatus
from nightshift.errors import ProviderError
from nightshift.parts import Parts
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import batch_summaries
from nightshift.store import items as item_store
from nightshift.store import provider_batches as batch_store
from nightshift.store.agent_cache import AgentCache
from nightshift.store.message_cache import MessageCache

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


def retry_delay(failures: int, *, backoff: timedelta, retryable: bool) -> timedelta | None:
    """How long a stage that failed ``failures`` times in a row waits before it is tried again;
    None: it is given up."""
    if failures >= (MAX_TRANSIENT_FAILURES if retryable else MAX_FAILURES):
        return None
    return min(backoff * (1 << (failures - 1)), MAX_BACKOFF)


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """One lease owner's batch loop: what its stages use, its leases, and when it stops."""

    parts: StageParts
    leases: Leases
    # The first wait before a failed stage (the provider unreachable, say) is tried again.
    error_backoff: timedelta = timedelta(seconds=30)
    # When due sleep-time agents are gathered into a batch run of their own.
    sleeptime: SleeptimeRules = field(default_factory=SleeptimeRules)
    # Set when the process shuts down: claim nothing more, and start no other claimed batch.
    # Shared with the workers of ``for_request``.
    draining: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def engine(self) -> AsyncEngine:
        return self.parts.engine

    @property
    def owner(self) -> str:
        return self.leases.owner

    @property
    def poll_interval(self) -> float:
        """Seconds between two polls of a running batch (and two passes of the poller)."""
        return self.parts.poll_interval.total_seconds()

    async def next_pass_in(self) -> float:
        """Seconds until the poller's next pass: when the first provider batch is due, within the
        poll interval, and no sooner than the shortest gap between two polls (a batch due now is
        leased by another process)."""
        schedule = self.parts.poll_schedule
        if schedule.fixed:
            return self.poll_interval
        async with self.engine.connect() as conn:
            earliest = await batch_store.earliest_due(conn)
        if earliest is None:
            return self.poll_interval
        due_in = (earliest - self.parts.clock.now()).total_seconds()
        return min(self.poll_interval, max(schedule.shortest.total_seconds(), due_in))

    def for_request(self) -> Worker:
        """This worker under a lease name of its own, for work done outside the poller (an API
        request; see ``Leases.for_request``)."""
        return replace(self, leases=self.leases.for_request())

    async def gather_sleeptime(self) -> int:
        """Queue the due sleep-time agents as batch runs when it is time (see ``batch/sleeptime.py``);
        returns how many runs were queued (started by ``start_queued_runs``)."""
        if self.draining.is_set():
            return 0
        return len(await sleeptime.gather_when_due(self.engine, self.parts.clock, self.sleeptime))

    async def start_queued_runs(self) -> int:
        """Write the first step of every queued run, one run per transaction, and submit it (a
        failed submission is retried as any). Returns how many runs were started."""
        started = 0
        while not self.draining.is_set():
            claimed = await run_queue.start_one(self.parts, self.leases)
            if claimed is None:
                return started
            await self.submit_new(claimed.batches)
            started += claimed.started
        return started

    async def run_once(self, *, limit: int = 50) -> int:
        """Claim the provider batches that are due and take each one stage further (or to the end).

        Returns how many batches were handled. Once ``draining`` is set it claims nothing, and the
        batches it claimed but did not start stay leased until ``give_back_all``.
        """
        if self.draining.is_set():
            return 0
        async with self.engine.begin() as conn:
            claimed = await batch_store.claim_due(
                conn,
                self.owner,
                self.parts.clock.now(),
                lease_seconds=self.leases.lease_seconds,
                limit=limit,
                endpoints=self.parts.providers.endpoints(),
            )
        for handled, batch in enumerate(claimed):
            if self.draining.is_set():
                return handled
            try:
                async with self.leases.holding(batch.id):
                    await self._advance(batch)
            except Exception as exc:
                # Never mark anything done on an unexpected error: try again, and give up in the end.
                log.exception("provider batch %s failed to advance", batch.id)
                await self._failed(batch, f"{type(exc).__name__}: {exc}", retryable=False)
        return len(claimed)

    async def _advance(self, batch: ProviderBatch) -> None:
        if batch.status is ProviderBatchStatus.CREATED:
            await self.submit(batch)  # polled when it is next due
            return
        if batch.status is ProviderBatchStatus.RUNNING:
            polled = await application.poll(self.parts, self.leases, batch)
            await self._act(polled)
            batch = polled.batch  # ended (to apply now), still running, or cancelled meanwhile
        if batch.status is ProviderBatchStatus.ENDED:
            if batch.takeover_at is not None:  # cancelled for its deadline: what it never ran goes now
                await takeover.take_over(self.parts, batch)
            await self._act(await application.resume(self.parts, self.leases, batch))
        elif batch.status is ProviderBatchStatus.CANCELLING:
            await self.cancel(batch)

    async def _act(self, done: StageOutcome) -> None:
        """Do what a stage's outcome calls for: the lease given back, a failure counted, the
        batches it wrote submitted."""
        if done.outcome is Outcome.FAILED:
            assert done.reason is not None
            await self._failed(done.batch, done.reason, retryable=done.retryable)
        elif done.outcome is Outcome.RESUBMIT:
            assert done.reason is not None
            attempts = done.batch.failures + 1
            await self.leases.record_failure(
                done.batch, failures=attempts, error=done.reason, delay=self.error_backoff * attempts
            )
        if done.due_in is not None:
            await self.leases.release(done.batch, delay=done.due_in)
        if done.next_batches:
            await self.submit_new(done.next_batches)

    async def _failed(self, batch: ProviderBatch, reason: str, *, retryable: bool) -> None:
        """Count a failure of the batch's current stage: try it again later, or give it up."""
        async with self.engine.connect() as conn:
            current = await batch_store.get_provider_batch(conn, batch.id)
        if current is None:
            return
        failures = current.failures + 1
        delay = retry_delay(failures, backoff=self.error_backoff, retryable=retryable)
        if delay is not None:
            await self.leases.record_failure(current, failures=failures, error=reason, delay=delay)
            return
        log.error("provider batch %s failed %d times in a row; giving it up: %s", batch.id, failures, reason)
        await give_up(self.parts, self.leases, current, f"gave up after {failures} failures in a row: {reason}")

    async def submit(self, batch: ProviderBatch, written: WrittenBatch | None = None) -> ProviderBatch:
        """Send a created provider batch to its provider, once (see ``batch/submission.py``);
        returns it as it is now."""
        done = await submission.submit(self.parts, self.leases, batch, written)
        await self._act(done)
        return done.batch

    async def submit_new(self, batches: Sequence[ProviderBatch | WrittenBatch | Prepared]) -> None:
        """Submit batches this worker just wrote (and holds the lease of); the poller retries failures."""
        for new in batches:
            batch = new if isinstance(new, ProviderBatch) else new.batch
            try:
                async with self.leases.holding(batch.id):
                    if isinstance(new, Prepared):
                        await self._act(await submission.send_prepared(self.parts, self.leases, new))
                    else:
                        await self.submit(batch, new if isinstance(new, WrittenBatch) else None)
            except Exception:
                log.exception("submitting %s failed; the poller will retry", batch.id)

    async def cancel(self, batch: ProviderBatch) -> None:
        """Tell the provider to cancel a batch of a cancelled run (or whose every agent left the run);
        its results are never applied."""
        await self._act(await cancel(self.parts, self.leases, batch))


async def cancel(parts: StageParts, leases: Leases, batch: ProviderBatch) -> StageOutcome:
    """The cancel stage: tell the provider, then cancelling -> cancelled (the lease given back); a
    run still open ends if that was its last open batch (see ``cancel_agent``)."""
    started = time.monotonic()
    if batch.provider_batch_id is not None:
        try:
            await parts.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
        except ProviderError as exc:
            if exc.retryable:
                return StageOutcome(outcome=Outcome.FAILED, batch=batch, reason=exc.message, retryable=True)
            log.warning("cancelling %s at the provider failed: %s", batch.id, exc.message)
    now = parts.clock.now()
    async with parts.engine.begin() as conn:
        await batch_run_store.lock_run(conn, batch.batch_run_id)
        cancelled = await batch_store.mark_cancelled(conn, batch.id, now, only_from=(ProviderBatchStatus.CANCELLING,))
        await batch_store.release(conn, batch.id, leases.owner, next_poll_at=None)
        agents = await item_store.count_items(conn, batch.id) if cancelled else 0
        if cancelled:  # a batch every agent of which left its run: the run may be done now
            await application.end_run_if_done(conn, batch.batch_run_id, now)
    if not cancelled:
        return StageOutcome(outcome=Outcome.LEFT, batch=batch)
    stage_done(Stage.CANCEL, batch, agents=agents, started=started, metrics=parts.metrics)
    return StageOutcome(outcome=Outcome.CANCELLED, batch=batch)


async def give_up(parts: StageParts, leases: Leases, batch: ProviderBatch, reason: str) -> None:
    """The give-up stage: end a batch whose stage keeps failing; its agents fail with ``reason``,
    the run goes on. The lease is given back, the batch never due again."""
    now = parts.clock.now()
    if batch.status is ProviderBatchStatus.CANCELLING:
        async with parts.engine.begin() as conn:
            await batch_store.mark_cancelled(conn, batch.id, now, only_from=(batch.status,), error=reason)
            await batch_store.release(conn, batch.id, leases.owner, next_poll_at=None)
        return
    if batch.status is ProviderBatchStatus.RUNNING and batch.provider_batch_id is not None:
        with contextlib.suppress(ProviderError):  # best effort: nothing more of it will be read
            await parts.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
    if batch.status in (ProviderBatchStatus.CREATED, ProviderBatchStatus.RUNNING):
        async with parts.engine.connect() as conn:
            items = await item_store.items_of(conn, batch.id)
        results = [failed_result(item.id, reason) for item in items]
        await submission.end_batch(parts, leases, batch, results, only_from=batch.status, error=reason)
        return
    if batch.status is ProviderBatchStatus.ENDED:
        async with parts.engine.begin() as conn:
            await batch_run_store.lock_run(conn, batch.batch_run_id)
            if await batch_store.mark_applied(conn, batch.id, now, error=reason):
                items = await item_store.items_of(conn, batch.id)
                failed = [ItemCompletion(item_id=i.id, outcome=ItemOutcome.FAILED, error=reason) for i in items]
                await item_store.complete_items(conn, failed, now)
                await batch_summaries.record_summaries(conn, [batch.id])
                await application.end_run_if_done(conn, batch.batch_run_id, now)
            await batch_store.release(conn, batch.id, leases.owner, next_poll_at=None)


def lease_seconds(poll_interval: float, configured: float | None) -> float:
    """How long a lease lasts: as configured, or ``LEASE_POLL_INTERVALS`` poll intervals."""
    return configured or max(MIN_LEASE_SECONDS, LEASE_POLL_INTERVALS * poll_interval)


def worker_of(parts: Parts) -> Worker:
    """The poller's worker of a process, its settings read from ``parts`` once."""
    settings = parts.settings
    return Worker(
        parts=StageParts(
            engine=parts.engine,
            providers=parts.providers,
            sandbox=parts.sandbox,
            prices=parts.prices,
            metrics=parts.metrics,
            clock=parts.clock,
            poll_interval=timedelta(seconds=settings.poll_interval_seconds),
            poll_schedule=PollSchedule(
                engine=parts.engine,
                shortest=timedelta(seconds=settings.poll_min_seconds),
                longest=timedelta(seconds=settings.poll_interval_seconds),
            ),
            summary_model=settings.summary_model,
            cache_policy=settings.cache_policy,
            batch_bytes=settings.batch_bytes,
            messages=MessageCache(settings.message_cache_mb * 2**20, clock=parts.clock)
            if settings.message_cache_mb
            else None,
            agents=AgentCache(settings.agent_cache_mb * 2**20, clock=parts.clock) if settings.agent_cache_mb else None,
        ),
        leases=Leases(
            owner=worker_id(),
            lease_seconds=lease_seconds(settings.poll_interval_seconds, settings.lease_seconds),
            clock=parts.clock,
            engine=parts.engine,
        ),
        error_backoff=timedelta(seconds=settings.error_backoff_seconds),
        sleeptime=SleeptimeRules(
            interval=timedelta(seconds=settings.sleeptime_interval_seconds), enough=settings.sleeptime_enough
        ),
    )
