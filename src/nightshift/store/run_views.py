"""What a run looks like from outside: its progress, its messages, its agents with their items."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batches import BatchItem, ItemOutcome, RunProgress, StepStatus
from nightshift.domain.messages import Message
from nightshift.store.bulk import in_ids
from nightshift.store.items import to_item
from nightshift.store.messages import to_message
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import batch_items, messages, provider_batches


async def run_progress(conn: AsyncConnection, run_id: str) -> RunProgress:
    """The run's items by outcome, its current step, its tokens and cost: two statements."""
    by_state = await conn.execute(
        select(
            batch_items.c.step_status,
            batch_items.c.outcome,
            func.count(),
            func.max(provider_batches.c.step_number),
        )
        .join(provider_batches, provider_batches.c.id == batch_items.c.provider_batch_id)
        .where(batch_items.c.batch_run_id == run_id)
        .group_by(batch_items.c.step_status, batch_items.c.outcome)
    )
    running, step = 0, 0
    outcomes: dict[ItemOutcome, int] = {}
    for step_status, outcome, count, max_step in by_state:
        step = max(step, int(max_step or 0))
        if step_status == StepStatus.PAUSED.value or outcome is None:
            running += int(count)
        else:
            outcomes[ItemOutcome(outcome)] = outcomes.get(ItemOutcome(outcome), 0) + int(count)
    usage_rows = await conn.execute(
        select(batch_items.c.usage, batch_items.c.cost_usd).where(
            batch_items.c.batch_run_id == run_id, batch_items.c.usage.is_not(None)
        )
    )
    usage: dict[str, int] = {}
    cost = 0.0
    for row_usage, row_cost in usage_rows:
        for key, value in (row_usage or {}).items():
            usage[key] = usage.get(key, 0) + int(value)
        cost += float(row_cost or 0.0)
    return RunProgress(running=running, outcomes=outcomes, step=step, usage=usage, cost_usd=cost)


async def run_messages(conn: AsyncConnection, run_id: str, page: Page, *, agent_id: str | None = None) -> list[Message]:
    """Messages linked to any item of the run, paged by message id (creation order)."""
    item_ids = select(batch_items.c.id).where(batch_items.c.batch_run_id == run_id)
    query = select(messages).where(messages.c.batch_item_id.in_(item_ids))
    if agent_id is not None:
        query = query.where(messages.c.agent_id == agent_id)
    return [to_message(row) for row in await conn.execute(paginate(query, messages.c.id, page))]


async def run_agent_items(
    conn: AsyncConnection, run_id: str, *, after: str | None, limit: int
) -> dict[str, list[BatchItem]]:
    """A page of the run's agents (by id) with each one's items, oldest first: two statements."""
    page = select(batch_items.c.agent_id).where(batch_items.c.batch_run_id == run_id)
    if after is not None:
        page = page.where(batch_items.c.agent_id > after)
    page = page.group_by(batch_items.c.agent_id).order_by(batch_items.c.agent_id).limit(limit)
    agent_ids = [str(a) for a in await conn.scalars(page)]
    query = (
        select(batch_items)
        .where(batch_items.c.batch_run_id == run_id, in_ids(conn, batch_items.c.agent_id, agent_ids))
        .order_by(batch_items.c.agent_id, batch_items.c.id)
    )
    found: dict[str, list[BatchItem]] = {agent_id: [] for agent_id in agent_ids}
    for row in await conn.execute(query):
        found[row.agent_id].append(to_item(row))
    return found
