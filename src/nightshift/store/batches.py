"""Batch runs, provider batches and batch items, read and written in bulk.

State changes that must happen once are compare-and-set updates (``WHERE status = <from>``):
the caller checks the returned count, so a second process that lost a race changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batches import (
    BatchItem,
    BatchRun,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
    RunStatus,
    StepState,
    StepStatus,
)
from nightshift.store.bulk import in_ids
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import batch_items, batch_runs, messages, provider_batches

# What a claim may pick up: batches to submit, to poll, to apply, or to cancel at the provider.
CLAIMABLE = [
    ProviderBatchStatus.CREATED.value,
    ProviderBatchStatus.RUNNING.value,
    ProviderBatchStatus.ENDED.value,
    ProviderBatchStatus.CANCELLING.value,
]


def to_run(row: Row[Any]) -> BatchRun:
    """Map a ``batch_runs`` row to the domain type."""
    return BatchRun(
        id=row.id,
        organization_id=row.organization_id,
        status=RunStatus(row.status),
        metadata=row.metadata,
        max_steps=row.max_steps,
        callback_url=row.callback_url,
        callback_sent_at=row.callback_sent_at,
        callback_status_code=row.callback_status_code,
        callback_error=row.callback_error,
        callback_attempts=row.callback_attempts,
        completed_at=row.completed_at,
        idempotency_key=row.idempotency_key,
        request_hash=row.request_hash,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def to_provider_batch(row: Row[Any]) -> ProviderBatch:
    """Map a ``provider_batches`` row to the domain type."""
    return ProviderBatch(
        id=row.id,
        organization_id=row.organization_id,
        batch_run_id=row.batch_run_id,
        provider=row.provider,
        step_number=row.step_number,
        status=ProviderBatchStatus(row.status),
        endpoint=row.endpoint,
        provider_batch_id=row.provider_batch_id,
        provider_status=row.provider_status,
        request_counts=row.request_counts,
        error=row.error,
        submit_started_at=row.submit_started_at,
        submit_attempts=row.submit_attempts,
        failures=row.failures,
        duplicates=tuple(row.duplicates),
        created_at=row.created_at,
        updated_at=row.updated_at,
        polled_at=row.polled_at,
        ended_at=row.ended_at,
    )


def to_item(row: Row[Any]) -> BatchItem:
    """Map a ``batch_items`` row to the domain type."""
    return BatchItem(
        id=row.id,
        organization_id=row.organization_id,
        batch_run_id=row.batch_run_id,
        provider_batch_id=row.provider_batch_id,
        agent_id=row.agent_id,
        request_status=RequestStatus(row.request_status),
        step_status=StepStatus(row.step_status),
        step_state=StepState.from_json(row.step_state),
        result=row.result,
        usage=row.usage,
        cost_usd=row.cost_usd,
        error=row.error,
        outcome=row.outcome,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def insert_run(conn: AsyncConnection, run: BatchRun) -> None:
    await conn.execute(
        insert(batch_runs).values(
            id=run.id,
            organization_id=run.organization_id,
            status=run.status.value,
            metadata=run.metadata,
            max_steps=run.max_steps,
            callback_url=run.callback_url,
            callback_attempts=0,
            idempotency_key=run.idempotency_key,
            request_hash=run.request_hash,
            created_at=run.created_at,
            updated_at=run.updated_at,
        )
    )


async def get_run(conn: AsyncConnection, org_id: str, run_id: str) -> BatchRun | None:
    query = select(batch_runs).where(batch_runs.c.organization_id == org_id, batch_runs.c.id == run_id)
    row = (await conn.execute(query)).first()
    return to_run(row) if row is not None else None


async def run_by_idempotency_key(conn: AsyncConnection, org_id: str, key: str) -> BatchRun | None:
    """The organization's run created with this Idempotency-Key, if any."""
    query = select(batch_runs).where(batch_runs.c.organization_id == org_id, batch_runs.c.idempotency_key == key)
    row = (await conn.execute(query)).first()
    return to_run(row) if row is not None else None


async def list_runs(
    conn: AsyncConnection, org_id: str, page: Page, *, statuses: Sequence[RunStatus] = ()
) -> list[BatchRun]:
    query = select(batch_runs).where(batch_runs.c.organization_id == org_id)
    if statuses:
        query = query.where(batch_runs.c.status.in_([s.value for s in statuses]))
    return [to_run(r) for r in await conn.execute(paginate(query, batch_runs.c.id, page))]


async def lock_run(conn: AsyncConnection, run_id: str) -> None:
    """Hold the run's row until the transaction ends, so that work on one run is serialised.

    Every transaction that changes a run's provider batches takes this lock first (one lock
    order, no deadlocks), and the one that applies a run's last open batch then sees the others'
    work and ends the run. SQLite serialises all writers anyway.
    """
    if conn.dialect.name == "postgresql":
        await conn.execute(select(batch_runs.c.id).where(batch_runs.c.id == run_id).with_for_update())


async def set_run_status(
    conn: AsyncConnection, run_id: str, status: RunStatus, now: datetime, *, only_from: Iterable[RunStatus]
) -> bool:
    """Move a run to ``status`` if it is in one of ``only_from``; True when it moved."""
    values: dict[str, Any] = {"status": status.value, "updated_at": now}
    if status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
        values["completed_at"] = now
    result = await conn.execute(
        update(batch_runs)
        .where(batch_runs.c.id == run_id, batch_runs.c.status.in_([s.value for s in only_from]))
        .values(**values)
    )
    return result.rowcount > 0


async def insert_provider_batches(
    conn: AsyncConnection, new: Sequence[ProviderBatch], *, lease: tuple[str, datetime] | None = None
) -> None:
    """Insert provider batches, due at once, optionally leased to ``(owner, expiry)``."""
    if not new:
        return
    owner, expires = lease if lease else (None, None)
    await conn.execute(
        insert(provider_batches),
        [
            {
                "id": b.id,
                "organization_id": b.organization_id,
                "batch_run_id": b.batch_run_id,
                "provider": b.provider,
                "endpoint": b.endpoint,
                "provider_batch_id": b.provider_batch_id,
                "step_number": b.step_number,
                "status": b.status.value,
                "provider_status": b.provider_status,
                "request_counts": b.request_counts,
                "next_poll_at": b.created_at,
                "lease_owner": owner,
                "lease_expires_at": expires,
                "created_at": b.created_at,
                "updated_at": b.updated_at,
            }
            for b in new
        ],
    )


async def insert_items(conn: AsyncConnection, new: Sequence[BatchItem]) -> None:
    if not new:
        return
    await conn.execute(
        insert(batch_items),
        [
            {
                "id": i.id,
                "organization_id": i.organization_id,
                "batch_run_id": i.batch_run_id,
                "provider_batch_id": i.provider_batch_id,
                "agent_id": i.agent_id,
                "request_status": i.request_status.value,
                "step_status": i.step_status.value,
                "step_state": i.step_state.to_json(),
                "created_at": i.created_at,
                "updated_at": i.updated_at,
            }
            for i in new
        ],
    )


async def get_provider_batch(conn: AsyncConnection, batch_id: str) -> ProviderBatch | None:
    row = (await conn.execute(select(provider_batches).where(provider_batches.c.id == batch_id))).first()
    return to_provider_batch(row) if row is not None else None


async def provider_batches_of_run(conn: AsyncConnection, run_id: str) -> list[ProviderBatch]:
    query = (
        select(provider_batches)
        .where(provider_batches.c.batch_run_id == run_id)
        .order_by(provider_batches.c.step_number, provider_batches.c.id)
    )
    return [to_provider_batch(r) for r in await conn.execute(query)]


async def items_of(conn: AsyncConnection, provider_batch_id: str) -> list[BatchItem]:
    query = select(batch_items).where(batch_items.c.provider_batch_id == provider_batch_id).order_by(batch_items.c.id)
    return [to_item(r) for r in await conn.execute(query)]


async def agents_in_open_steps(conn: AsyncConnection, agent_ids: Sequence[str]) -> set[str]:
    """Which of these agents have a step that is not yet applied."""
    query = select(batch_items.c.agent_id).where(
        in_ids(conn, batch_items.c.agent_id, agent_ids), batch_items.c.step_status == StepStatus.PAUSED.value
    )
    return {str(a) for a in await conn.scalars(query)}


async def claim_due(
    conn: AsyncConnection,
    owner: str,
    now: datetime,
    *,
    lease_seconds: float,
    limit: int,
    endpoints: Mapping[str, str],
) -> list[ProviderBatch]:
    """Lease up to ``limit`` provider batches that are due, free (or whose lease expired) and go to
    one of ``endpoints`` (the provider base URLs this worker reaches).

    On PostgreSQL the candidates are locked with ``FOR UPDATE SKIP LOCKED`` so that concurrent
    pollers pick different batches; on both databases the update re-checks the lease, so a batch
    is never held by two owners.
    """
    free = or_(provider_batches.c.lease_owner.is_(None), provider_batches.c.lease_expires_at < now)
    reachable = or_(
        provider_batches.c.endpoint.is_(None),  # written before endpoints were recorded
        *(
            and_(provider_batches.c.provider == provider, provider_batches.c.endpoint == endpoint)
            for provider, endpoint in endpoints.items()
        ),
    )
    candidates = (
        select(provider_batches.c.id)
        .where(
            provider_batches.c.status.in_(CLAIMABLE),
            provider_batches.c.next_poll_at <= now,
            free,
            reachable,
        )
        .order_by(provider_batches.c.next_poll_at)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        candidates = candidates.with_for_update(skip_locked=True)
    ids = [str(i) for i in await conn.scalars(candidates)]
    if not ids:
        return []
    claimed = await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id.in_(ids), free)
        .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_seconds))
        .returning(*provider_batches.c)
    )
    return [to_provider_batch(r) for r in claimed]


async def record_submit_intent(conn: AsyncConnection, batch_id: str, owner: str, now: datetime) -> bool:
    """Note that ``owner`` is about to submit a created batch; False when it no longer may.

    Written (and committed) before the provider is called: from then on the provider may hold the
    batch, and whoever submits it next looks for it there first.
    """
    result = await conn.execute(
        update(provider_batches)
        .where(
            provider_batches.c.id == batch_id,
            provider_batches.c.status == ProviderBatchStatus.CREATED.value,
            provider_batches.c.lease_owner == owner,
        )
        .values(submit_started_at=now, submit_attempts=provider_batches.c.submit_attempts + 1)
    )
    return result.rowcount > 0


async def known_provider_ids(conn: AsyncConnection, provider: str, ids: Sequence[str]) -> set[str]:
    """Which of these provider batch ids some provider batch of ours already holds."""
    if not ids:
        return set()
    query = select(provider_batches.c.provider_batch_id).where(
        provider_batches.c.provider == provider, in_ids(conn, provider_batches.c.provider_batch_id, ids)
    )
    return {str(i) for i in await conn.scalars(query)}


async def add_duplicates(conn: AsyncConnection, batch_id: str, duplicates: Sequence[str]) -> None:
    """Record provider ids of copies of this batch that were found and cancelled."""
    if not duplicates:
        return
    current = await conn.scalar(select(provider_batches.c.duplicates).where(provider_batches.c.id == batch_id))
    merged = list(dict.fromkeys([*(current or []), *duplicates]))
    await conn.execute(update(provider_batches).where(provider_batches.c.id == batch_id).values(duplicates=merged))


async def renew_lease(conn: AsyncConnection, batch_id: str, owner: str, expires_at: datetime) -> bool:
    """Push back the expiry of ``owner``'s lease on a batch; False when ``owner`` no longer holds it."""
    result = await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id, provider_batches.c.lease_owner == owner)
        .values(lease_expires_at=expires_at)
    )
    return result.rowcount > 0


async def release(
    conn: AsyncConnection, batch_id: str, owner: str, *, next_poll_at: datetime | None, **values: Any
) -> None:
    """Give up the lease on a batch, storing ``values`` and when it is next due."""
    await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id, provider_batches.c.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None, next_poll_at=next_poll_at, **values)
    )


async def transition(
    conn: AsyncConnection,
    batch_id: str,
    to: ProviderBatchStatus,
    now: datetime,
    *,
    only_from: Iterable[ProviderBatchStatus],
    **values: Any,
) -> bool:
    """Move a provider batch to ``to`` if it is in ``only_from`` (compare-and-set); True when it moved.

    A stage that moved its batch on succeeded: the count of its failures starts again.
    """
    result = await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id, provider_batches.c.status.in_([s.value for s in only_from]))
        .values(status=to.value, updated_at=now, failures=0, **values)
    )
    return result.rowcount > 0


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


async def store_results(conn: AsyncConnection, rows: Sequence[dict[str, Any]], now: datetime) -> None:
    """Store results of items: each row has ``item_id``, ``request_status``, ``result``, ``usage``, ``error``."""
    if not rows:
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
    await conn.execute(statement, list(rows))


async def complete_items(conn: AsyncConnection, rows: Sequence[dict[str, Any]], now: datetime) -> None:
    """Mark items applied: each row has ``item_id``, ``outcome``, ``error``, ``cost_usd``."""
    if not rows:
        return
    statement = (
        update(batch_items)
        .where(batch_items.c.id == bindparam("item_id"))
        .values(
            step_status=StepStatus.COMPLETED.value,
            outcome=bindparam("outcome"),
            error=bindparam("error"),
            cost_usd=bindparam("cost_usd"),
            updated_at=now,
        )
    )
    await conn.execute(statement, list(rows))


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
            outcome="cancelled",
            updated_at=now,
        )
    )


async def open_batches_of_run(conn: AsyncConnection, run_id: str) -> int:
    """How many provider batches of the run are not yet applied or cancelled."""
    query = select(func.count()).where(
        provider_batches.c.batch_run_id == run_id,
        provider_batches.c.status.not_in([ProviderBatchStatus.APPLIED.value, ProviderBatchStatus.CANCELLED.value]),
    )
    return int(await conn.scalar(query) or 0)


async def run_progress(conn: AsyncConnection, run_id: str) -> dict[str, Any]:
    """Counts of the run's items by outcome and status, the current step, usage and cost."""
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
    counts: dict[str, int] = {}
    step = 0
    for step_status, outcome, count, max_step in by_state:
        key = "running" if step_status == StepStatus.PAUSED.value else str(outcome or "completed")
        counts[key] = counts.get(key, 0) + int(count)
        step = max(step, int(max_step or 0))
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
    return {"items": counts, "step": step, "usage": usage, "cost_usd": cost}


async def run_messages(
    conn: AsyncConnection, run_id: str, page: Page, *, agent_id: str | None = None
) -> list[Row[Any]]:
    """Message rows linked to any item of the run, paged by message id (creation order)."""
    item_ids = select(batch_items.c.id).where(batch_items.c.batch_run_id == run_id)
    query = select(messages).where(messages.c.batch_item_id.in_(item_ids))
    if agent_id is not None:
        query = query.where(messages.c.agent_id == agent_id)
    return list(await conn.execute(paginate(query, messages.c.id, page)))


async def callbacks_due(conn: AsyncConnection, now: datetime, *, limit: int) -> list[BatchRun]:
    """Ended runs whose callback has not been delivered yet and is due for a (re)try."""
    query = (
        select(batch_runs)
        .where(
            batch_runs.c.callback_url.is_not(None),
            batch_runs.c.callback_sent_at.is_(None),
            batch_runs.c.status.in_([RunStatus.COMPLETED.value, RunStatus.FAILED.value, RunStatus.CANCELLED.value]),
            or_(batch_runs.c.callback_next_at.is_(None), batch_runs.c.callback_next_at <= now),
        )
        .limit(limit)
    )
    return [to_run(r) for r in await conn.execute(query)]


async def record_callback(
    conn: AsyncConnection,
    run_id: str,
    *,
    attempts: int,
    sent_at: datetime | None,
    status_code: int | None,
    error: str | None,
    next_at: datetime | None,
) -> None:
    await conn.execute(
        update(batch_runs)
        .where(batch_runs.c.id == run_id, and_(batch_runs.c.callback_sent_at.is_(None)))
        .values(
            callback_attempts=attempts,
            callback_sent_at=sent_at,
            callback_status_code=status_code,
            callback_error=error,
            callback_next_at=next_at,
        )
    )


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
