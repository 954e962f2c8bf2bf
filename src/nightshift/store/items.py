"""Batch items: one agent inside one provider batch, its request's result and how its step ended."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import bindparam, func, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.answers import StoredResult
from nightshift.domain.batches import (
    BatchItem,
    ItemCompletion,
    ItemOutcome,
    ItemResult,
    RequestStatus,
    StepState,
    StepStatus,
)
from nightshift.domain.usage import Usage
from nightshift.store.bulk import in_ids
from nightshift.store.copy import execute_rows, insert_rows
from nightshift.store.mapping import row_reader, row_writer
from nightshift.store.tables import batch_items, batch_run_requests

# Map a ``batch_items`` row to the domain type.
to_item = row_reader(
    BatchItem,
    batch_items,
    request_status=RequestStatus,
    step_status=StepStatus,
    step_state=StepState.from_json,
    outcome=ItemOutcome,
    usage=Usage.from_json,
    result=StoredResult.from_json,
)
_item_values = row_writer(
    BatchItem, batch_items, step_state=StepState.to_json, usage=Usage.to_json, result=StoredResult.to_json
)


async def insert_items(conn: AsyncConnection, new: Sequence[BatchItem]) -> None:
    await insert_rows(conn, batch_items, list(map(_item_values, new)))


async def items_of(conn: AsyncConnection, provider_batch_id: str) -> list[BatchItem]:
    query = select(batch_items).where(batch_items.c.provider_batch_id == provider_batch_id).order_by(batch_items.c.id)
    return [to_item(r) for r in await conn.execute(query)]


async def unanswered_items(conn: AsyncConnection, provider_batch_id: str) -> list[BatchItem]:
    """The open items of an ended provider batch that it cancelled or let expire before their
    request ran: what a take-over sends through the normal API (``batch/takeover.py``)."""
    query = (
        select(batch_items)
        .where(
            batch_items.c.provider_batch_id == provider_batch_id,
            batch_items.c.step_status == StepStatus.PAUSED.value,
            batch_items.c.request_status.in_((RequestStatus.CANCELLED.value, RequestStatus.EXPIRED.value)),
        )
        .order_by(batch_items.c.id)
    )
    return [to_item(r) for r in await conn.execute(query)]


async def awaiting_results(conn: AsyncConnection, provider_batch_id: str) -> dict[str, str]:
    """The items of a provider batch whose request went in (not failed before), as agent id -> item id."""
    query = select(batch_items.c.agent_id, batch_items.c.id).where(
        batch_items.c.provider_batch_id == provider_batch_id,
        batch_items.c.request_status != RequestStatus.FAILED.value,
    )
    return {str(agent_id): str(item_id) for agent_id, item_id in await conn.execute(query)}


async def count_items(conn: AsyncConnection, provider_batch_id: str) -> int:
    """How many agents a provider batch holds."""
    query = select(func.count()).select_from(batch_items).where(batch_items.c.provider_batch_id == provider_batch_id)
    return int(await conn.scalar(query) or 0)


async def agents_in_open_steps(conn: AsyncConnection, agent_ids: Sequence[str]) -> set[str]:
    """Which of these agents have a step that is not yet applied, or are in a run whose first step
    is not yet written (its queued requests reserve them)."""
    open_steps = select(batch_items.c.agent_id).where(
        in_ids(conn, batch_items.c.agent_id, agent_ids), batch_items.c.step_status == StepStatus.PAUSED.value
    )
    queued = select(batch_run_requests.c.agent_id).where(in_ids(conn, batch_run_requests.c.agent_id, agent_ids))
    return {str(a) for a in await conn.scalars(union_all(open_steps, queued))}


async def move_items(conn: AsyncConnection, item_ids: Sequence[str], provider_batch_id: str, now: datetime) -> None:
    """Put these items into another provider batch (of the same run and step: a part of theirs)."""
    if item_ids:
        await conn.execute(
            update(batch_items)
            .where(in_ids(conn, batch_items.c.id, item_ids))
            .values(provider_batch_id=provider_batch_id, updated_at=now)
        )


async def set_items_request_status(
    conn: AsyncConnection, provider_batch_id: str, status: RequestStatus, now: datetime
) -> None:
    """Set the request status of every item of a provider batch that has no final one yet."""
    await conn.execute(
        update(batch_items)
        .where(
            batch_items.c.provider_batch_id == provider_batch_id,
            batch_items.c.request_status.in_([RequestStatus.CREATED.value, RequestStatus.RUNNING.value]),
        )
        .values(request_status=status.value, updated_at=now)
    )


async def store_results(conn: AsyncConnection, results: Sequence[ItemResult], now: datetime) -> None:
    """Store the results of items whose step is still open, in one statement."""
    if not results:
        return
    statement = (
        update(batch_items)
        .where(batch_items.c.id == bindparam("item_id"), batch_items.c.step_status == StepStatus.PAUSED.value)
        .values(
            request_status=bindparam("request_status"),
            result=bindparam("result"),
            usage=bindparam("usage"),
            error=bindparam("error"),
            updated_at=now,
        )
    )
    rows = [
        {
            "item_id": r.item_id,
            "request_status": r.request_status.value,
            "result": r.result.to_json(),
            "usage": r.usage.to_json() if r.usage is not None else None,
            "error": r.error,
        }
        for r in results
    ]
    await execute_rows(conn, statement, rows)


async def complete_items(conn: AsyncConnection, completions: Sequence[ItemCompletion], now: datetime) -> None:
    """Mark items' steps applied, with how each ended, in one statement; an item closed already (its
    agent was deleted meanwhile, ``close_items_of_agent``) keeps how it ended."""
    if not completions:
        return
    statement = (
        update(batch_items)
        .where(batch_items.c.id == bindparam("item_id"), batch_items.c.step_status == StepStatus.PAUSED.value)
        .values(
            step_status=StepStatus.COMPLETED.value,
            outcome=bindparam("outcome"),
            error=bindparam("error"),
            cost_usd=bindparam("cost_usd"),
            cost_without_batch_usd=bindparam("cost_without_batch_usd"),
            cache_savings_usd=bindparam("cache_savings_usd"),
            takeover_usd=bindparam("takeover_usd"),
            updated_at=now,
        )
    )
    rows = [
        {
            "item_id": c.item_id,
            "outcome": c.outcome.value,
            "error": c.error,
            "cost_usd": c.cost.usd if c.cost else None,
            "cost_without_batch_usd": c.cost.without_batch_usd if c.cost else None,
            "cache_savings_usd": c.cost.cache_savings_usd if c.cost else None,
            "takeover_usd": c.cost.takeover_usd if c.cost and c.cost.takeover_usd else None,
        }
        for c in completions
    ]
    await execute_rows(conn, statement, rows)


async def cancel_items(conn: AsyncConnection, provider_batch_id: str, now: datetime) -> None:
    """Close every still-open item of a cancelled provider batch without applying anything."""
    await conn.execute(
        update(batch_items)
        .where(
            batch_items.c.provider_batch_id == provider_batch_id, batch_items.c.step_status == StepStatus.PAUSED.value
        )
        .values(
            request_status=RequestStatus.CANCELLED.value,
            step_status=StepStatus.COMPLETED.value,
            outcome=ItemOutcome.CANCELLED.value,
            updated_at=now,
        )
    )


async def runs_with_open_items(conn: AsyncConnection, agent_id: str) -> set[str]:
    """The batch runs in which the agent has a step not yet applied."""
    query = select(batch_items.c.batch_run_id).where(
        batch_items.c.agent_id == agent_id, batch_items.c.step_status == StepStatus.PAUSED.value
    )
    return {str(run_id) for run_id in await conn.scalars(query.distinct())}


async def runs_with_agent(conn: AsyncConnection, agent_id: str, run_ids: Sequence[str]) -> set[str]:
    """Which of ``run_ids`` are batch runs that the agent has stepped in (or is queued in)."""
    stepped = select(batch_items.c.batch_run_id).where(
        batch_items.c.agent_id == agent_id, in_ids(conn, batch_items.c.batch_run_id, run_ids)
    )
    queued = select(batch_run_requests.c.batch_run_id).where(
        batch_run_requests.c.agent_id == agent_id, in_ids(conn, batch_run_requests.c.batch_run_id, run_ids)
    )
    return {str(run_id) for run_id in await conn.scalars(union_all(stepped, queued))}


async def count_open_items(conn: AsyncConnection, provider_batch_id: str) -> int:
    """How many items of a provider batch have their step still open: not applied, nor closed
    early (from an index, reading no item)."""
    query = (
        select(func.count())
        .select_from(batch_items)
        .where(
            batch_items.c.provider_batch_id == provider_batch_id, batch_items.c.step_status == StepStatus.PAUSED.value
        )
    )
    return int(await conn.scalar(query) or 0)


async def open_item_ids(conn: AsyncConnection, provider_batch_id: str) -> set[str]:
    """The items of a provider batch whose step is still open: not applied, nor closed early."""
    query = select(batch_items.c.id).where(
        batch_items.c.provider_batch_id == provider_batch_id, batch_items.c.step_status == StepStatus.PAUSED.value
    )
    return {str(item_id) for item_id in await conn.scalars(query)}


async def close_items_of_agent(
    conn: AsyncConnection, agent_id: str, reason: str, now: datetime, *, run_ids: Sequence[str] | None = None
) -> dict[str, str]:
    """Close the agent's open items (in these runs, or all: it is being deleted, or its part of the
    runs is cancelled): cancelled with ``reason``, its late results never stored nor applied.
    Returns the provider batches they are in (whose stored summaries no longer add up), with
    the run of each."""
    where = [batch_items.c.agent_id == agent_id, batch_items.c.step_status == StepStatus.PAUSED.value]
    if run_ids is not None:
        where.append(in_ids(conn, batch_items.c.batch_run_id, run_ids))
    closed = await conn.execute(
        update(batch_items)
        .where(*where)
        .values(
            request_status=RequestStatus.CANCELLED.value,
            step_status=StepStatus.COMPLETED.value,
            outcome=ItemOutcome.CANCELLED.value,
            error=reason,
            updated_at=now,
        )
        .returning(batch_items.c.provider_batch_id, batch_items.c.batch_run_id)
    )
    return {str(batch_id): str(run_id) for batch_id, run_id in closed}
