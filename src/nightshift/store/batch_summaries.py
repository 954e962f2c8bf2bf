"""What a provider batch's items add up to (``BatchSummary``), for the views of its run.

The summary is stored on the batch, so that a look at a run reads its batches' rows instead of
their items, at each change of what it sums, in the transaction that makes the change:

* written with its items (``provider_batches.insert_provider_batches``): so many items, all
  paused, no usage. Until the batch ends nothing changes that: results are stored on its items
  as they are read, but the items stay paused (their usage is summed when the batch ends);
  cutting a batch too large for its provider moves items to new batches (``record_new_items``);
* ended, its results all stored (``record_usage``): the usage of its items added up;
* applied or cancelled, its items final (``complete_items``, ``cancel_items``; ``record_summaries``).

Nothing changes an item of a closed batch afterwards (retries are new items in new batches);
deleting its agent leaves it as it is. Deleting an agent in an open batch closes its item there
(cancelled): the summaries of those batches are then forgotten (``forget_summaries``) and their
items counted at each look until the batch is final, as are those of batches written before
summaries were stored with the items. (Counting an open batch's items at each look costs the
database work that grows with the step, while the run steps: what the stored summary saves.)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from sqlalchemy import bindparam, func, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batch_progress import BatchSummary
from nightshift.domain.batches import ItemOutcome, ProviderBatchStatus, StepStatus
from nightshift.domain.costs import Costs
from nightshift.domain.usage import USAGE_KEYS, Usage
from nightshift.store.bulk import in_ids
from nightshift.store.tables import batch_items, provider_batches

# Batches whose items are all final: every item was completed or cancelled as the batch moved here.
FINAL = [ProviderBatchStatus.APPLIED.value, ProviderBatchStatus.CANCELLING.value, ProviderBatchStatus.CANCELLED.value]


async def summarize(conn: AsyncConnection, batch_ids: Sequence[str]) -> dict[str, BatchSummary]:
    """The summaries of these batches counted from their items (a batch without items is left
    out), in two statements whatever their number."""
    if not batch_ids:
        return {}
    items = await _count_items(conn, batch_ids)
    usage, cost = await _sum_usage(conn, batch_ids)
    return {
        batch_id: BatchSummary(items=dict(items[batch_id]), usage=usage.get(batch_id), cost=cost.get(batch_id, Costs()))
        for batch_id in items.keys() | usage.keys()
    }


async def _count_items(
    conn: AsyncConnection, batch_ids: Sequence[str]
) -> defaultdict[str, Counter[tuple[StepStatus, ItemOutcome | None]]]:
    """The items of each batch by (step status, outcome), from an index: one statement."""
    by_state = await conn.execute(
        select(batch_items.c.provider_batch_id, batch_items.c.step_status, batch_items.c.outcome, func.count())
        .where(in_ids(conn, batch_items.c.provider_batch_id, batch_ids))
        .group_by(batch_items.c.provider_batch_id, batch_items.c.step_status, batch_items.c.outcome)
    )
    items: defaultdict[str, Counter[tuple[StepStatus, ItemOutcome | None]]] = defaultdict(Counter)
    for batch_id, step_status, outcome, count in by_state:
        items[batch_id][StepStatus(step_status), ItemOutcome(outcome) if outcome else None] += int(count)
    return items


async def _sum_usage(conn: AsyncConnection, batch_ids: Sequence[str]) -> tuple[dict[str, Usage], dict[str, Costs]]:
    """The usage and costs of each batch's items that have a usage (batches with none are absent):
    one statement. It reads each such item's row and parses its usage."""
    # Summed by the database, per batch: reading and adding up ten thousand usages in Python would
    # hold the event loop.
    sums = await conn.execute(
        select(
            batch_items.c.provider_batch_id,
            *(func.sum(batch_items.c.usage[key].as_integer()) for key in USAGE_KEYS),
            func.sum(batch_items.c.cost_usd),
            func.sum(batch_items.c.cost_without_batch_usd),
            func.sum(batch_items.c.cache_savings_usd),
            func.sum(batch_items.c.takeover_usd),
        )
        .where(in_ids(conn, batch_items.c.provider_batch_id, batch_ids), batch_items.c.usage.is_not(None))
        .group_by(batch_items.c.provider_batch_id)
    )
    usage: dict[str, Usage] = {}
    cost: dict[str, Costs] = {}
    for batch_id, *values in sums:
        tokens, (billed, without_batch, savings, takeover) = values[: len(USAGE_KEYS)], values[len(USAGE_KEYS) :]
        # A key no item holds (usage stored before it existed) sums to NULL: zero, as it is for each.
        usage[batch_id] = Usage.from_json({key: int(total or 0) for key, total in zip(USAGE_KEYS, tokens, strict=True)})
        cost[batch_id] = Costs(
            usd=float(billed or 0.0),
            without_batch_usd=float(without_batch or 0.0),
            cache_savings_usd=float(savings or 0.0),
            takeover_usd=float(takeover or 0.0),
        )
    return usage, cost


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


async def record_usage(conn: AsyncConnection, batch_id: str) -> None:
    """Store the summary of an ended batch (its results are all stored, and they change no more):
    its items counted and their usage added up. In the transaction that ended the batch; three
    statements."""
    summary = (await summarize(conn, [batch_id])).get(batch_id, BatchSummary())
    await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id, provider_batches.c.status == ProviderBatchStatus.ENDED.value)
        .values(summary=summary.to_json())
    )


async def record_new_items(conn: AsyncConnection, items: Mapping[str, int]) -> None:
    """Store the summary of batches not yet submitted that now hold so many items (``items``:
    batch id to count), all paused, no usage: in the transaction that moved items out of them."""
    await conn.execute(
        update(provider_batches)
        .where(
            provider_batches.c.id == bindparam("b_id"), provider_batches.c.status == ProviderBatchStatus.CREATED.value
        )
        .values(summary=bindparam("summary")),
        [{"b_id": batch_id, "summary": BatchSummary.of_new_items(n).to_json()} for batch_id, n in items.items()],
    )


async def forget_summaries(conn: AsyncConnection, batch_ids: Sequence[str]) -> None:
    """Drop the stored summaries of these batches (an item of theirs was closed early: its agent
    was deleted): their items are counted again at each look, which is right whatever they hold."""
    if batch_ids:
        await conn.execute(
            update(provider_batches).where(in_ids(conn, provider_batches.c.id, batch_ids)).values(summary=null())
        )


async def summaries_of_runs(
    conn: AsyncConnection, run_ids: Sequence[str]
) -> dict[str, list[tuple[str, int, BatchSummary]]]:
    """Each run's provider batches as (id, step number, summary), every id present: the stored
    summaries; those of batches that have none, or (ended before summaries held their items) one
    without item counts, counted from their items. One statement, and at most three more when
    some batch has no summary to read."""
    rows = (
        await conn.execute(
            select(
                provider_batches.c.id,
                provider_batches.c.batch_run_id,
                provider_batches.c.step_number,
                provider_batches.c.status,
                provider_batches.c.summary,
            ).where(in_ids(conn, provider_batches.c.batch_run_id, run_ids))
        )
    ).all()
    counted = await summarize(conn, [row.id for row in rows if row.summary is None])
    ended = [row.id for row in rows if row.summary is not None and row.status not in FINAL and not row.summary["items"]]
    items = await _count_items(conn, ended) if ended else {}
    found: dict[str, list[tuple[str, int, BatchSummary]]] = {run_id: [] for run_id in run_ids}
    for row in rows:
        summary = BatchSummary.from_json(row.summary) if row.summary is not None else counted.get(row.id)
        if row.id in items:
            assert summary is not None
            summary = replace(summary, items=dict(items[row.id]))
        if summary is not None:
            found[row.batch_run_id].append((row.id, row.step_number, summary))
    return found
