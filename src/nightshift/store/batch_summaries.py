"""What a provider batch's items add up to (``BatchSummary``), for the views of its run.

Counted from the items while the batch is open. Once its items are final, which happens in the
transaction that applies the batch (``complete_items``) or cancels it (``cancel_items``), the
summary is stored on the batch in that same transaction, so that a look at a run reads its
batches' rows instead of every item of its closed steps. Nothing changes an item of a closed
batch afterwards (results are stored on paused items only; retries are new items in new
batches), except deleting its agent, which takes the item with it: the summaries of that agent's
batches are then forgotten and their items counted again, as for an open batch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from sqlalchemy import bindparam, func, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batches import BatchSummary, Costs, ItemOutcome, ProviderBatchStatus, StepStatus
from nightshift.store.bulk import in_ids
from nightshift.store.tables import batch_items, provider_batches

# The keys of an item's stored usage (``batch/outcomes.usage_json``), which the summaries sum.
USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
)
# Batches whose items are all final: every item was completed or cancelled as the batch moved here.
FINAL = [ProviderBatchStatus.APPLIED.value, ProviderBatchStatus.CANCELLING.value, ProviderBatchStatus.CANCELLED.value]


async def summarize(conn: AsyncConnection, batch_ids: Sequence[str]) -> dict[str, BatchSummary]:
    """The summaries of these batches counted from their items (a batch without items is left
    out), in two statements whatever their number."""
    if not batch_ids:
        return {}
    in_batches = in_ids(conn, batch_items.c.provider_batch_id, batch_ids)
    by_state = await conn.execute(
        select(batch_items.c.provider_batch_id, batch_items.c.step_status, batch_items.c.outcome, func.count())
        .where(in_batches)
        .group_by(batch_items.c.provider_batch_id, batch_items.c.step_status, batch_items.c.outcome)
    )
    items: defaultdict[str, Counter[tuple[StepStatus, ItemOutcome | None]]] = defaultdict(Counter)
    for batch_id, step_status, outcome, count in by_state:
        items[batch_id][StepStatus(step_status), ItemOutcome(outcome) if outcome else None] += int(count)
    # Summed by the database, per batch: reading and adding up ten thousand usages in Python held
    # the event loop for tens of milliseconds.
    sums = await conn.execute(
        select(
            batch_items.c.provider_batch_id,
            *(func.sum(batch_items.c.usage[key].as_integer()) for key in USAGE_KEYS),
            func.sum(batch_items.c.cost_usd),
            func.sum(batch_items.c.cost_without_batch_usd),
            func.sum(batch_items.c.cache_savings_usd),
        )
        .where(in_batches, batch_items.c.usage.is_not(None))
        .group_by(batch_items.c.provider_batch_id)
    )
    usage: dict[str, dict[str, int]] = {}
    cost: dict[str, Costs] = {}
    for batch_id, *values in sums:
        tokens, (billed, without_batch, savings) = values[: len(USAGE_KEYS)], values[len(USAGE_KEYS) :]
        # A key no item holds (usage stored before it existed) stays out, as it is absent from each.
        usage[batch_id] = {key: int(total) for key, total in zip(USAGE_KEYS, tokens, strict=True) if total is not None}
        cost[batch_id] = Costs(
            usd=float(billed or 0.0),
            without_batch_usd=float(without_batch or 0.0),
            cache_savings_usd=float(savings or 0.0),
        )
    return {
        batch_id: BatchSummary(items=dict(items[batch_id]), usage=usage.get(batch_id), cost=cost.get(batch_id, Costs()))
        for batch_id in items.keys() | usage.keys()
    }


async def record_summaries(conn: AsyncConnection, batch_ids: Sequence[str]) -> None:
    """Store the summaries of these batches, those whose items are final: in the transaction that
    made them final (applied, or cancelled), after it did. Three statements."""
    if not batch_ids:
        return
    found = await summarize(conn, batch_ids)
    await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == bindparam("b_id"), provider_batches.c.status.in_(FINAL))
        .values(summary=bindparam("summary")),
        [{"b_id": batch_id, "summary": found.get(batch_id, BatchSummary()).to_json()} for batch_id in batch_ids],
    )


async def forget_summaries(conn: AsyncConnection, batch_ids: Sequence[str]) -> None:
    """Drop the stored summaries of these batches (some of their items were deleted): their items
    are counted again at each look, which is right whatever they hold."""
    if batch_ids:
        await conn.execute(
            update(provider_batches).where(in_ids(conn, provider_batches.c.id, batch_ids)).values(summary=null())
        )


async def summaries_of_runs(
    conn: AsyncConnection, run_ids: Sequence[str]
) -> dict[str, list[tuple[str, int, BatchSummary]]]:
    """Each run's provider batches as (id, step number, summary), every id present: the stored
    summaries, and those of the batches still open counted from their items. One statement, and
    two more when some batch is open."""
    rows = (
        await conn.execute(
            select(
                provider_batches.c.id,
                provider_batches.c.batch_run_id,
                provider_batches.c.step_number,
                provider_batches.c.summary,
            ).where(in_ids(conn, provider_batches.c.batch_run_id, run_ids))
        )
    ).all()
    counted = await summarize(conn, [row.id for row in rows if row.summary is None])
    found: dict[str, list[tuple[str, int, BatchSummary]]] = {run_id: [] for run_id in run_ids}
    for row in rows:
        summary = BatchSummary.from_json(row.summary) if row.summary is not None else counted.get(row.id)
        if summary is not None:
            found[row.batch_run_id].append((row.id, row.step_number, summary))
    return found
