"""The batch work of every organization counted at once, for the metrics: three statements, whatever its size."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batch_progress import BatchCensus
from nightshift.domain.batches import BatchRunStatus, ProviderBatchStatus, StepStatus
from nightshift.store.provider_batches import CLAIMABLE
from nightshift.store.tables import batch_items, batch_runs, provider_batches


async def batch_census(conn: AsyncConnection) -> BatchCensus:
    """Runs and provider batches by status, the agents in an open step, and the oldest due batch."""
    runs = {BatchRunStatus(status): int(count) for status, count in await conn.execute(_RUNS)}
    batches: dict[ProviderBatchStatus, int] = {}
    due: list[datetime] = []
    for status, count, oldest in await conn.execute(_BATCHES):
        batches[ProviderBatchStatus(status)] = int(count)
        if status in CLAIMABLE and oldest is not None:
            due.append(oldest)
    stepping = int(await conn.scalar(_STEPPING) or 0)
    return BatchCensus(
        runs=runs, provider_batches=batches, agents_stepping=stepping, oldest_due_at=min(due, default=None)
    )


_RUNS = select(batch_runs.c.status, func.count()).group_by(batch_runs.c.status)
_BATCHES = select(provider_batches.c.status, func.count(), func.min(provider_batches.c.next_poll_at)).group_by(
    provider_batches.c.status
)
# Through the open provider batches (few, by the status index) rather than every item ever written.
_STEPPING = (
    select(func.count(batch_items.c.agent_id.distinct()))
    .select_from(batch_items.join(provider_batches, provider_batches.c.id == batch_items.c.provider_batch_id))
    .where(provider_batches.c.status.in_(CLAIMABLE), batch_items.c.step_status == StepStatus.PAUSED.value)
)
