"""The batch worker: takes leased provider batches through submit -> poll -> resume (or cancel).

Every stage is a state transition written in the same transaction as its effects, checked with
compare-and-set, so re-running a stage after a crash (or in a second process whose lease expired)
finds it done and changes nothing:

* submit: read the batch's items, build the requests, submit; then created -> running.
* poll: ask the provider; when it has ended, store every item's result; running -> ended.
* resume: run the tools, then in one transaction write the messages, memory edits and the next
  step, mark the items completed; ended -> applied. The run ends when nothing is left open.
* cancel: tell the provider; cancelling -> cancelled.

Tool side effects happen at least once (a crash after the tools ran but before the write runs
them again); everything in the database happens exactly once.

A worker renews the lease of each batch while it works on it, so a lease outlives its owner only
by ``lease_seconds``: the batches of a worker that died are taken over that soon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.outcomes import failed_row, outcome_row, response_from_json, stored_error
from nightshift.batch.steps import StepEntry, write_step
from nightshift.config import Settings
from nightshift.domain.agents import Agent
from nightshift.domain.batches import (
    BatchItem,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
    RunStatus,
)
from nightshift.errors import ProviderError
from nightshift.pricing import PriceTable
from nightshift.providers.base import BatchState, ModelError, ModelProvider
from nightshift.providers.clients import ProviderSet, preload
from nightshift.runtime.context import build_requests
from nightshift.runtime.persist import write_turns
from nightshift.runtime.search import StoreSearch
from nightshift.runtime.step import Turn, TurnResult, take_turns
from nightshift.store import agents as agent_store
from nightshift.store import batches as batch_store
from nightshift.tools.sandbox import Sandbox, build_sandbox

log = logging.getLogger(__name__)

# Transient per-request errors (rate limits, overload) are retried in the next step this often.
TRANSIENT_RETRIES = 2
# A failed stage is tried again after ``Worker.error_backoff``, doubled with each failure up to this.
MAX_BACKOFF = timedelta(minutes=15)
# Submissions refused for a transient reason are tried this often before the agents fail.
SUBMIT_ATTEMPTS = 5
# A stage that fails this many times in a row is given up (the batch's agents fail with the
# reason): an error that will not go away (a bug, a refusal) after MAX_FAILURES, one that may
# (the provider unreachable or overloaded) after MAX_TRANSIENT_FAILURES, about a day of backoff.
MAX_FAILURES = 5
MAX_TRANSIENT_FAILURES = 100
# How long before its recorded intent a batch the provider accepted may seem to have been created
# (the provider's clock and ours differ).
ADOPT_WINDOW = timedelta(minutes=5)
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
    poll_interval: float
    prices: PriceTable = field(default_factory=PriceTable)
    lease_seconds: float = 600.0
    # The first wait before a failed callback is sent again (see ``batch/callbacks.py``).
    callback_retry_delay: timedelta = timedelta(seconds=2)
    # Whether callbacks may go to loopback and private addresses (see ``batch/callbacks.py``).
    callback_allow_private: bool = False
    # The first wait before a failed stage (the provider unreachable, say) is tried again.
    error_backoff: timedelta = timedelta(seconds=30)

    def lease(self, now: datetime) -> tuple[str, datetime]:
        """A lease on batches this worker creates and submits at once, so no other poller takes them."""
        return self.owner, now + timedelta(seconds=self.lease_seconds)

    def own_lease(self, now: datetime) -> tuple[str, datetime]:
        """A lease of a name no one else uses, for work done outside the poller (an API request).

        The poller of this process holds its batches under ``owner``: a batch the request takes
        over while the poller works on it must not be released by the poller's next release.
        """
        return f"{self.owner}:{uuid.uuid4().hex[:8]}", now + timedelta(seconds=self.lease_seconds)

    async def run_once(self, *, limit: int = 50) -> int:
        """Claim the provider batches that are due and take each one stage further (or to the end).

        Returns how many batches were handled.
        """
        async with self.engine.begin() as conn:
            claimed = await batch_store.claim_due(
                conn,
                self.owner,
                datetime.now(UTC),
                lease_seconds=self.lease_seconds,
                limit=limit,
                endpoints=self.providers.endpoints(),
            )
        for batch in claimed:
            try:
                async with self.holding(batch.id):
                    await self._advance(batch)
            except Exception as exc:
                # Never mark anything done on an unexpected error: try again, and give up in the end.
                log.exception("provider batch %s failed to advance", batch.id)
                await self._stage_failed(batch, f"{type(exc).__name__}: {exc}", retryable=False)
        return len(claimed)

    async def _advance(self, batch: ProviderBatch) -> None:
        if batch.status is ProviderBatchStatus.CREATED:
            await self.submit(batch)  # polled when it is next due
            return
        if batch.status is ProviderBatchStatus.RUNNING:
            batch = await self.poll(batch)
        if batch.status is ProviderBatchStatus.ENDED:
            await self.resume(batch)
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

    async def _release(self, batch: ProviderBatch, *, delay: timedelta, **values: object) -> None:
        async with self.engine.begin() as conn:
            await batch_store.release(conn, batch.id, self.owner, next_poll_at=datetime.now(UTC) + delay, **values)

    async def _stage_failed(self, batch: ProviderBatch, reason: str, *, retryable: bool) -> None:
        """Count a failure of the batch's current stage: try it again later, or give it up."""
        async with self.engine.connect() as conn:
            current = await batch_store.get_provider_batch(conn, batch.id)
        if current is None:
            return
        failures = current.failures + 1
        if failures < (MAX_TRANSIENT_FAILURES if retryable else MAX_FAILURES):
            delay = min(self.error_backoff * 2 ** (failures - 1), MAX_BACKOFF)
            await self._release(current, delay=delay, failures=failures, error=reason)
            return
        log.error("provider batch %s failed %d times in a row; giving it up: %s", batch.id, failures, reason)
        await self._give_up(current, f"gave up after {failures} failures in a row: {reason}")

    async def _give_up(self, batch: ProviderBatch, reason: str) -> None:
        """End a batch whose stage keeps failing: its agents fail with ``reason``, the run goes on."""
        now = datetime.now(UTC)
        if batch.status is ProviderBatchStatus.CANCELLING:
            async with self.engine.begin() as conn:
                await batch_store.transition(
                    conn, batch.id, ProviderBatchStatus.CANCELLED, now, only_from=(batch.status,), error=reason
                )
                await batch_store.release(conn, batch.id, self.owner, next_poll_at=None)
            return
        if batch.status is ProviderBatchStatus.RUNNING and batch.provider_batch_id is not None:
            with contextlib.suppress(ProviderError):  # best effort: nothing more of it will be read
                await self.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
        if batch.status in (ProviderBatchStatus.CREATED, ProviderBatchStatus.RUNNING):
            async with self.engine.connect() as conn:
                items = await batch_store.items_of(conn, batch.id)
            rows = [failed_row(item.id, reason) for item in items]
            await self._end(batch, rows, now, only_from=batch.status, release=True, error=reason)
            return
        if batch.status is ProviderBatchStatus.ENDED:
            async with self.engine.begin() as conn:
                await batch_store.lock_run(conn, batch.batch_run_id)
                if await batch_store.transition(
                    conn, batch.id, ProviderBatchStatus.APPLIED, now, only_from=(batch.status,), error=reason
                ):
                    items = await batch_store.items_of(conn, batch.id)
                    rows = [{"item_id": i.id, "outcome": "failed", "error": reason, "cost_usd": None} for i in items]
                    await batch_store.complete_items(conn, rows, now)
                    await _end_run_if_done(conn, batch.batch_run_id, now)
                await batch_store.release(conn, batch.id, self.owner, next_poll_at=None)

    async def submit(self, batch: ProviderBatch) -> ProviderBatch:
        """Send a created provider batch to its provider, once, and give up the lease; returns it as it is now.

        The intent is recorded before the call. When an earlier attempt recorded it (and may have
        reached the provider before a crash), the batch is first looked for at the provider and
        adopted if it is there. An agent whose request cannot be built fails alone. A batch the
        provider refused for good ends at once with every item failed, and is applied (its agents
        stopped, with the reason) by the next poll.
        """
        async with self.engine.connect() as conn:
            items = await batch_store.items_of(conn, batch.id)
            agents = await agent_store.load_agents(conn, batch.organization_id, [i.agent_id for i in items])
            present = [i for i in items if i.agent_id in agents]
            requests, problems = await build_requests(
                conn, [agents[i.agent_id] for i in present], {i.agent_id: i.step_state for i in present}
            )
        refused = [
            failed_row(i.id, f"the request could not be built: {problems[i.agent_id]}")
            for i in present
            if i.agent_id in problems
        ]
        now = datetime.now(UTC)
        if not requests:
            error = "no request of this batch could be built"
            return await self._end(
                batch, refused, now, only_from=ProviderBatchStatus.CREATED, release=True, error=error
            )
        try:
            provider = self.providers.get(batch.provider)
            adopted = await self._adopt(batch, provider, set(requests))
            if isinstance(adopted, _Wait):
                await self._release(batch, delay=timedelta(seconds=self.poll_interval))
                return batch
            provider_batch_id = adopted
            if provider_batch_id is None:
                async with self.engine.begin() as conn:
                    if not await batch_store.record_submit_intent(conn, batch.id, self.owner, now):
                        current = await batch_store.get_provider_batch(conn, batch.id)
                        assert current is not None
                        return current  # moved on (cancelled) or taken over meanwhile
                provider_batch_id = await provider.submit_batch(requests, tag=batch.id)
        except ProviderError as exc:
            attempts = batch.failures + 1
            if exc.retryable and attempts < SUBMIT_ATTEMPTS:
                log.warning("submitting %s failed (%s); retrying", batch.id, exc.message)
                await self._release(batch, delay=self.error_backoff * attempts, error=exc.message, failures=attempts)
                return replace(batch, status=ProviderBatchStatus.CREATED)
            return await self._fail_submission(batch, items, exc)
        return await self._submitted(batch, provider_batch_id, refused)

    async def _adopt(self, batch: ProviderBatch, provider: ModelProvider, custom_ids: set[str]) -> str | _Wait | None:
        """The provider's id of this batch if an earlier attempt got it there; None to submit it;
        ``WAIT`` when that cannot be told yet.

        Found by tag, every candidate is a copy of this batch: the first is adopted, the others
        (a submission whose answer was lost, then another) are cancelled at once and recorded on
        the batch. Found by request count only, a candidate may be another batch of the same
        size (of another run, in flight at the same moment): it is adopted only once it has
        ended and its custom ids are this batch's. Until every candidate has ended the batch
        waits; when none of them is it, it is submitted.
        """
        if batch.submit_started_at is None:
            return None  # never sent
        found = await provider.find_batches(
            batch.id, created_after=batch.submit_started_at - ADOPT_WINDOW, requests=len(custom_ids)
        )
        async with self.engine.connect() as conn:
            known = await batch_store.known_provider_ids(conn, batch.provider, found.ids)
        candidates = [provider_id for provider_id in found.ids if provider_id not in known]
        if not candidates:
            return None
        if found.tagged:
            adopted, *copies = candidates
            await self._cancel_copies(batch, provider, copies)
        else:
            ended = await _ended_with(provider, candidates, custom_ids)
            if not isinstance(ended, str):
                return ended
            adopted = ended
        log.warning(
            "provider batch %s was accepted by %s before a crash: adopting %s", batch.id, batch.provider, adopted
        )
        return adopted

    async def _cancel_copies(self, batch: ProviderBatch, provider: ModelProvider, copies: Sequence[str]) -> None:
        for copy in copies:
            log.warning("cancelling %s, a second copy of provider batch %s", copy, batch.id)
            with contextlib.suppress(ProviderError):  # it is recorded either way; a finished copy cannot be
                await provider.cancel_batch(copy)
        async with self.engine.begin() as conn:
            await batch_store.add_duplicates(conn, batch.id, copies)

    async def _submitted(
        self, batch: ProviderBatch, provider_batch_id: str, refused: Sequence[dict[str, Any]]
    ) -> ProviderBatch:
        """Record that the provider holds the batch; the agents that could not go in fail."""
        now = datetime.now(UTC)
        duplicate = False
        async with self.engine.begin() as conn:
            await batch_store.lock_run(conn, batch.batch_run_id)
            moved = await batch_store.transition(
                conn,
                batch.id,
                ProviderBatchStatus.RUNNING,
                now,
                only_from=(ProviderBatchStatus.CREATED,),
                provider_batch_id=provider_batch_id,
                error=None,
                next_poll_at=now + timedelta(seconds=self.poll_interval),
            )
            current = await batch_store.get_provider_batch(conn, batch.id)
            assert current is not None
            if moved:
                await batch_store.store_results(conn, refused, now)
                await batch_store.set_items_request_status(conn, batch.id, RequestStatus.RUNNING, now)
                await batch_store.set_run_status(
                    conn, batch.batch_run_id, RunStatus.RUNNING, now, only_from=(RunStatus.CREATED,)
                )
            elif current.status is ProviderBatchStatus.CANCELLED and current.provider_batch_id is None:
                # The run was cancelled while we submitted: remember the id so it is cancelled there too.
                await batch_store.transition(
                    conn,
                    batch.id,
                    ProviderBatchStatus.CANCELLING,
                    now,
                    only_from=(ProviderBatchStatus.CANCELLED,),
                    provider_batch_id=provider_batch_id,
                )
                current = replace(current, status=ProviderBatchStatus.CANCELLING)
            else:
                duplicate = current.provider_batch_id != provider_batch_id
        if duplicate:
            # Another worker submitted (or adopted) it meanwhile: ours is a second copy.
            await self._cancel_copies(batch, self.providers.get(batch.provider), [provider_batch_id])
        running = current.status is ProviderBatchStatus.RUNNING
        await self._release(current, delay=timedelta(seconds=self.poll_interval if running else 0))
        return current

    async def _fail_submission(
        self, batch: ProviderBatch, items: Sequence[BatchItem], exc: ProviderError
    ) -> ProviderBatch:
        """The provider refused the batch: every agent of it fails this step (resume records why)."""
        now = datetime.now(UTC)
        error = ModelError(type=exc.kind, message=exc.message)
        rows = [failed_row(item.id, f"{exc.kind}: {exc.message}", error) for item in items]
        return await self._end(batch, rows, now, only_from=ProviderBatchStatus.CREATED, release=True, error=exc.message)

    async def _end(
        self,
        batch: ProviderBatch,
        rows: Sequence[dict[str, Any]],
        now: datetime,
        *,
        only_from: ProviderBatchStatus,
        release: bool = False,
        **values: Any,
    ) -> ProviderBatch:
        """Move a batch to ended and store its items' results, in one transaction (once)."""
        async with self.engine.begin() as conn:
            if await batch_store.transition(
                conn, batch.id, ProviderBatchStatus.ENDED, now, only_from=(only_from,), **values
            ):
                await batch_store.store_results(conn, rows, now)
            if release:
                await batch_store.release(conn, batch.id, self.owner, next_poll_at=now)
            current = await batch_store.get_provider_batch(conn, batch.id)
        assert current is not None
        return current

    async def poll(self, batch: ProviderBatch) -> ProviderBatch:
        """Ask the provider about a running batch; when it has ended, store every result."""
        assert batch.provider_batch_id is not None
        provider = self.providers.get(batch.provider)
        try:
            status = await provider.retrieve_batch(batch.provider_batch_id)
        except ProviderError as exc:
            log.warning("polling %s failed (%s)", batch.id, exc.message)
            await self._stage_failed(batch, exc.message, retryable=exc.retryable)
            return replace(batch, status=ProviderBatchStatus.RUNNING)
        now = datetime.now(UTC)
        counts = {
            "processing": status.counts.processing,
            "succeeded": status.counts.succeeded,
            "errored": status.counts.errored,
            "canceled": status.counts.canceled,
            "expired": status.counts.expired,
        }
        if status.state is not BatchState.ENDED:
            await self._release(
                batch,
                delay=timedelta(seconds=self.poll_interval),
                provider_status=status.provider_status,
                request_counts=counts,
                polled_at=now,
                error=None,
                failures=0,
            )
            return batch
        async with self.engine.connect() as conn:
            # Items that failed before they went in (their request could not be built) keep that result.
            items = {
                i.agent_id: i
                for i in await batch_store.items_of(conn, batch.id)
                if i.request_status is not RequestStatus.FAILED
            }
        rows = []
        try:
            async for custom_id, outcome in provider.batch_results(batch.provider_batch_id):
                item = items.pop(custom_id, None)
                if item is not None:
                    rows.append(outcome_row(item.id, outcome))
        except ProviderError as exc:
            log.warning("reading the results of %s failed (%s)", batch.id, exc.message)
            await self._stage_failed(batch, exc.message, retryable=exc.retryable)
            return batch
        for item in items.values():  # a request the provider never answered
            rows.append(failed_row(item.id, "the provider returned no result for this request"))
        # The lease is kept: resume follows at once in this pass.
        return await self._end(
            batch,
            rows,
            now,
            only_from=ProviderBatchStatus.RUNNING,
            provider_status=status.provider_status,
            request_counts=counts,
            polled_at=now,
            ended_at=now,
            error=status.error,
        )

    async def resume(self, batch: ProviderBatch) -> None:
        """Apply an ended batch's results and write the next step for the agents that continue."""
        async with self.engine.connect() as conn:
            items = await batch_store.items_of(conn, batch.id)
            agents = await agent_store.load_agents(conn, batch.organization_id, [i.agent_id for i in items])
            turns: list[Turn] = []
            for item in items:
                result = item.result or {}
                if (
                    item.agent_id in agents
                    and item.request_status is RequestStatus.COMPLETED
                    and result.get("response")
                ):
                    turns.append(
                        Turn(
                            agent=agents[item.agent_id],
                            state=item.step_state,
                            response=response_from_json(result["response"]),
                            batch_item_id=item.id,
                        )
                    )
            # Tools run before the write transaction, so a slow tool never holds the database.
            results = await take_turns(turns, search=StoreSearch(conn), sandbox=self.sandbox, now=datetime.now(UTC))
        by_agent: dict[str, TurnResult] = {r.agent_id: r for r in results}
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            await batch_store.lock_run(conn, batch.batch_run_id)
            if not await batch_store.transition(
                conn, batch.id, ProviderBatchStatus.APPLIED, now, only_from=(ProviderBatchStatus.ENDED,)
            ):
                return  # applied (or cancelled) by someone else meanwhile
            run = await batch_store.get_run(conn, batch.organization_id, batch.batch_run_id)
            assert run is not None
            # Agents may have changed since the read (another run's step, an API edit): reload them.
            fresh = await agent_store.load_agents(conn, batch.organization_id, list(agents))
            updated = await write_turns(conn, fresh, results, now)
            run_open = run.status in (RunStatus.CREATED, RunStatus.RUNNING)
            # Agents without a result (a failed request to retry) are in ``fresh`` only.
            completions, entries = _next_step(items, by_agent, {**fresh, **updated}, run_open=run_open)
            for row, item in zip(completions, items, strict=True):
                agent = fresh.get(item.agent_id)
                if item.usage and agent is not None:
                    row["cost_usd"] = self.prices.cost(agent.llm_config.handle, item.usage, batch=True)
            await batch_store.complete_items(conn, completions, now)
            next_batches = await write_step(
                conn, run, entries, now, lease=self.lease(now), endpoints=self.providers.endpoints()
            )
            if not next_batches:
                await _end_run_if_done(conn, run.id, now)
            await batch_store.release(conn, batch.id, self.owner, next_poll_at=None)
        await self.submit_new(next_batches)

    async def submit_new(self, batches: Sequence[ProviderBatch]) -> None:
        """Submit batches this worker just wrote (and holds the lease of); the poller retries failures."""
        for batch in batches:
            try:
                async with self.holding(batch.id):
                    await self.submit(batch)
            except Exception:
                log.exception("submitting %s failed; the poller will retry", batch.id)

    async def cancel(self, batch: ProviderBatch, *, owner: str | None = None) -> None:
        """Tell the provider to cancel a batch of a cancelled run; its results are never applied.

        ``owner`` is the lease it is held under, when not this worker's own (see ``own_lease``).
        """
        if batch.provider_batch_id is not None:
            try:
                await self.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
            except ProviderError as exc:
                if exc.retryable:
                    if owner is None:
                        await self._stage_failed(batch, exc.message, retryable=True)
                    return  # else the poller takes it over when the request's lease expires
                log.warning("cancelling %s at the provider failed: %s", batch.id, exc.message)
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            await batch_store.transition(
                conn, batch.id, ProviderBatchStatus.CANCELLED, now, only_from=(ProviderBatchStatus.CANCELLING,)
            )
            await batch_store.release(conn, batch.id, owner or self.owner, next_poll_at=None)


class _Wait:
    """Whether an earlier attempt got a batch to the provider cannot be told yet."""


WAIT = _Wait()


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


async def _end_run_if_done(conn: AsyncConnection, run_id: str, now: datetime) -> None:
    """End the run when none of its provider batches is open: completed if any agent finished."""
    if await batch_store.open_batches_of_run(conn, run_id) > 0:
        return
    progress = await batch_store.run_progress(conn, run_id)
    final = RunStatus.COMPLETED if progress["items"].get("finished", 0) else RunStatus.FAILED
    await batch_store.set_run_status(conn, run_id, final, now, only_from=(RunStatus.CREATED, RunStatus.RUNNING))


def worker_id() -> str:
    """A name for this process in leases: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def running_worker(settings: Settings, engine: AsyncEngine) -> AsyncIterator[Worker]:
    """A worker with its tool sandbox and provider clients, all closed when the block ends."""
    async with build_sandbox(settings) as sandbox, ProviderSet() as providers:
        # The SDKs take seconds to import: in a thread, while the server already answers.
        preloading = asyncio.create_task(asyncio.to_thread(preload), name="preload-providers")
        yield Worker(
            engine=engine,
            providers=providers,
            sandbox=sandbox,
            owner=worker_id(),
            poll_interval=settings.poll_interval_seconds,
            lease_seconds=settings.lease_seconds
            or max(MIN_LEASE_SECONDS, LEASE_POLL_INTERVALS * settings.poll_interval_seconds),
            callback_retry_delay=timedelta(seconds=settings.callback_retry_seconds),
            callback_allow_private=settings.callback_allow_private,
            error_backoff=timedelta(seconds=settings.error_backoff_seconds),
            prices=PriceTable(settings.prices),
        )
        await preloading


def _next_step(
    items: Sequence[BatchItem],
    results: dict[str, TurnResult],
    agents: dict[str, Agent],
    *,
    run_open: bool,
) -> tuple[list[dict[str, object]], list[StepEntry]]:
    """How each item ends (``complete_items`` rows) and who goes into the next step."""
    completions: list[dict[str, object]] = []
    entries: list[StepEntry] = []
    for item in items:
        agent = agents.get(item.agent_id)
        result = results.get(item.agent_id)
        if result is not None and result.failure is not None:
            completions.append({"item_id": item.id, "outcome": "failed", "error": result.failure, "cost_usd": None})
            continue
        if result is not None:
            outcome = "continued" if result.continues and run_open else "finished"
            completions.append({"item_id": item.id, "outcome": outcome, "error": result.tool_error, "cost_usd": None})
            if outcome == "continued" and agent is not None:
                entries.append(StepEntry(agent=agent, state=result.state, heartbeat=True))
            continue
        error = stored_error(item.result)
        retry = (
            run_open
            and agent is not None
            and item.request_status is RequestStatus.FAILED
            and error is not None
            and error.retryable
            and item.step_state.retries < TRANSIENT_RETRIES
        )
        if retry and agent is not None:
            state = replace(item.step_state, retries=item.step_state.retries + 1)
            completions.append({"item_id": item.id, "outcome": "retried", "error": item.error, "cost_usd": None})
            entries.append(StepEntry(agent=agent, state=state))
        else:
            reason = item.error or (f"agent {item.agent_id} no longer exists" if agent is None else "no result")
            completions.append({"item_id": item.id, "outcome": "failed", "error": reason, "cost_usd": None})
    return completions, entries
