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

from sqlalchemy.ext.asyncio import AsyncEngine

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
from nightshift.providers.base import BatchState, ModelError
from nightshift.providers.clients import ProviderSet
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
# How long to wait before trying again after the provider could not be reached.
ERROR_BACKOFF = timedelta(seconds=30)
# Submissions refused for a transient reason are tried this often before the agents fail.
SUBMIT_ATTEMPTS = 5
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

    def lease(self, now: datetime) -> tuple[str, datetime]:
        """A lease on batches this worker creates and submits at once, so no other poller takes them."""
        return self.owner, now + timedelta(seconds=self.lease_seconds)

    async def run_once(self, *, limit: int = 50) -> int:
        """Claim the provider batches that are due and take each one stage further (or to the end).

        Returns how many batches were handled.
        """
        async with self.engine.begin() as conn:
            claimed = await batch_store.claim_due(
                conn, self.owner, datetime.now(UTC), lease_seconds=self.lease_seconds, limit=limit
            )
        for batch in claimed:
            try:
                async with self.holding(batch.id):
                    await self._advance(batch)
            except Exception:
                # Never mark anything done on an unexpected error: leave it to be tried again.
                log.exception("provider batch %s failed to advance; retrying later", batch.id)
                await self._release(batch, delay=ERROR_BACKOFF)
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

    async def submit(self, batch: ProviderBatch) -> ProviderBatch:
        """Send a created provider batch to its provider and give up the lease; returns it as it is now.

        A batch the provider refused for good ends at once with every item failed, and is applied
        (its agents stopped, with the reason) by the next poll.
        """
        async with self.engine.connect() as conn:
            items = await batch_store.items_of(conn, batch.id)
            agents = await agent_store.load_agents(conn, batch.organization_id, [i.agent_id for i in items])
            present = [i for i in items if i.agent_id in agents]
            requests = await build_requests(
                conn, [agents[i.agent_id] for i in present], {i.agent_id: i.step_state for i in present}
            )
        now = datetime.now(UTC)
        try:
            provider_batch_id = await self.providers.get(batch.provider).submit_batch(requests)
        except ProviderError as exc:
            attempts = int(batch.request_counts.get("submit_attempts", 0)) + 1
            if exc.retryable and attempts < SUBMIT_ATTEMPTS:
                log.warning("submitting %s failed (%s); retrying", batch.id, exc.message)
                counts = {**batch.request_counts, "submit_attempts": attempts}
                await self._release(batch, delay=ERROR_BACKOFF * attempts, error=exc.message, request_counts=counts)
                return replace(batch, status=ProviderBatchStatus.CREATED)
            return await self._fail_submission(batch, items, exc)
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
            if moved:
                await batch_store.set_items_request_status(conn, batch.id, RequestStatus.RUNNING, now)
                await batch_store.set_run_status(
                    conn, batch.batch_run_id, RunStatus.RUNNING, now, only_from=(RunStatus.CREATED,)
                )
            else:
                # The run was cancelled while we submitted: remember the id so it is cancelled there too.
                await batch_store.transition(
                    conn,
                    batch.id,
                    ProviderBatchStatus.CANCELLING,
                    now,
                    only_from=(ProviderBatchStatus.CANCELLED,),
                    provider_batch_id=provider_batch_id,
                )
            current = await batch_store.get_provider_batch(conn, batch.id)
        assert current is not None
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
            log.warning("polling %s failed (%s); polling again later", batch.id, exc.message)
            await self._release(batch, delay=ERROR_BACKOFF, error=exc.message)
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
            )
            return batch
        async with self.engine.connect() as conn:
            items = {i.agent_id: i for i in await batch_store.items_of(conn, batch.id)}
        rows = []
        try:
            async for custom_id, outcome in provider.batch_results(batch.provider_batch_id):
                item = items.pop(custom_id, None)
                if item is not None:
                    rows.append(outcome_row(item.id, outcome))
        except ProviderError as exc:
            log.warning("reading the results of %s failed (%s); reading again later", batch.id, exc.message)
            await self._release(batch, delay=ERROR_BACKOFF, error=exc.message)
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
            next_batches = await write_step(conn, run, entries, now, lease=self.lease(now))
            if not next_batches and await batch_store.open_batches_of_run(conn, run.id) == 0:
                progress = await batch_store.run_progress(conn, run.id)
                final = RunStatus.COMPLETED if progress["items"].get("finished", 0) else RunStatus.FAILED
                await batch_store.set_run_status(
                    conn, run.id, final, now, only_from=(RunStatus.CREATED, RunStatus.RUNNING)
                )
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

    async def cancel(self, batch: ProviderBatch) -> None:
        """Tell the provider to cancel a batch of a cancelled run; its results are never applied."""
        if batch.provider_batch_id is not None:
            try:
                await self.providers.get(batch.provider).cancel_batch(batch.provider_batch_id)
            except ProviderError as exc:
                if exc.retryable:
                    await self._release(batch, delay=ERROR_BACKOFF, error=exc.message)
                    return
                log.warning("cancelling %s at the provider failed: %s", batch.id, exc.message)
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            await batch_store.transition(
                conn, batch.id, ProviderBatchStatus.CANCELLED, now, only_from=(ProviderBatchStatus.CANCELLING,)
            )
            await batch_store.release(conn, batch.id, self.owner, next_poll_at=None)


def worker_id() -> str:
    """A name for this process in leases: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def running_worker(settings: Settings, engine: AsyncEngine) -> AsyncIterator[Worker]:
    """A worker with its tool sandbox and provider clients, all closed when the block ends."""
    async with build_sandbox(settings) as sandbox, ProviderSet() as providers:
        yield Worker(
            engine=engine,
            providers=providers,
            sandbox=sandbox,
            owner=worker_id(),
            poll_interval=settings.poll_interval_seconds,
            lease_seconds=max(MIN_LEASE_SECONDS, LEASE_POLL_INTERVALS * settings.poll_interval_seconds),
            callback_retry_delay=timedelta(seconds=settings.callback_retry_seconds),
            prices=PriceTable(settings.prices),
        )


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
