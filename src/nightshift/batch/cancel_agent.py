"""One agent leaves the batch runs it is in: its part of each ends at once, the others go on.

Cancelling an agent's runs (``POST /v1/agents/{id}/messages/cancel``) and deleting an agent both
end its part of its batch runs here: its open items (its step not yet applied) are closed,
cancelled with the reason, and, for a cancel, its request of a run still queued is taken out
(a queued run left with no request ends cancelled). Closing its item frees the agent at once: an
agent is reserved by an open item or a queued request, nothing else. The run's other agents go
on, and the run ends as it would have. A provider batch left with no open item is closed too
(cancelled at the provider, or applied with nothing to apply when it has ended), so that a run
whose last agents left ends then (``cancelled`` when none of them finished nor failed).

The database decides, not a process's memory. The closing is written in one transaction that
first locks the runs it touches (``batch_runs.lock_run``, in the order of their ids), as every
transaction that changes a run's batches does: a step applied at the same moment
(``application.resume``) either commits first, and the agent's next item (if any) is closed
here, or reads the item closed once it holds the lock, and applies nothing of it whatever the
provider answered. A poller that crashed, or one that took over its lease, sees the same. What
the provider answers for a closed item later is never stored (``items.store_results`` writes
only open items).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.batch.application import end_run_if_done
from nightshift.domain.batches import BatchRunStatus, ProviderBatchStatus
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import batch_summaries
from nightshift.store import items as item_store
from nightshift.store import provider_batches as batch_store

# Why an agent's part of its runs ended, as its items (and agent runs) say.
AGENT_DELETED = "the agent was deleted"
AGENT_CANCELLED = "the agent's part of the run was cancelled"


async def leave_runs(
    conn: AsyncConnection,
    agent_id: str,
    reason: str,
    now: datetime,
    *,
    run_ids: Sequence[str] | None = None,
    queued: bool = True,
) -> set[str]:
    """End the agent's part of its open batch runs (of ``run_ids``, or all), saying ``reason``.

    With ``queued`` its requests of queued runs are taken out too (a deleted agent's stay: the
    run's first step leaves it out). Returns the runs it left. Locks those runs until the
    transaction ends; the caller locks nothing of them before (one lock order).
    """
    runs = await item_store.runs_with_open_items(conn, agent_id)
    if queued:
        runs |= await batch_run_store.runs_queuing_agent(conn, agent_id)
    if run_ids is not None:
        runs &= set(run_ids)
    # Found before the locks are held: an agent is in one open run at a time, and the runs it is
    # in now are those it was in (a queued one may have started meanwhile: its items are closed).
    for run_id in sorted(runs):
        await batch_run_store.lock_run(conn, run_id)
    if not runs:
        return set()
    closed = await item_store.close_items_of_agent(
        conn, agent_id, reason, now, run_ids=sorted(runs) if run_ids is not None else None
    )
    await batch_summaries.forget_summaries(conn, sorted(closed))
    await _close_emptied(conn, sorted(closed), now)
    left = set(closed.values())
    for run_id in sorted(left):
        await end_run_if_done(conn, run_id, now)
    for run_id in sorted(runs - left) if queued else ():
        if await batch_run_store.forget_queued_request(conn, run_id, agent_id):
            left.add(run_id)
            if not await batch_run_store.is_queued(conn, run_id):  # it was the run's last agent
                await batch_run_store.set_run_status(
                    conn, run_id, BatchRunStatus.CANCELLED, now, only_from=(BatchRunStatus.CREATED,)
                )
    return left


async def _close_emptied(conn: AsyncConnection, batch_ids: Sequence[str], now: datetime) -> None:
    """Close the provider batches left with no open item: nothing of them will be applied, so
    their run need not wait for the provider. One submitted is cancelled there (by a poller's
    cancel stage, due at once), one not yet submitted is cancelled here (a submission in flight
    finds it so, as when its run is cancelled), one ended is applied with nothing to apply."""
    for batch_id in batch_ids:
        if await item_store.count_open_items(conn, batch_id):
            continue
        batch = await batch_store.get_provider_batch(conn, batch_id)
        assert batch is not None
        status = batch.status
        if status is ProviderBatchStatus.ENDED:
            moved = await batch_store.mark_applied(conn, batch_id, now)
        elif status in (ProviderBatchStatus.CREATED, ProviderBatchStatus.RUNNING) and batch.provider_batch_id:
            moved = await batch_store.mark_cancelling(conn, batch_id, now, only_from=(status,))
        elif status is ProviderBatchStatus.CREATED:
            moved = await batch_store.mark_cancelled(conn, batch_id, now, only_from=(status,))
        else:
            moved = False
        if moved:
            await batch_summaries.record_summaries(conn, [batch_id])
