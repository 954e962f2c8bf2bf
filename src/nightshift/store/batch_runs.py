"""Batch runs: what one ``POST /v1/messages/batches`` created, its status and its callback."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, Select, bindparam, delete, func, insert, literal_column, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batch_progress import KindCosts
from nightshift.domain.batches import TERMINAL_RUN_STATUSES, BatchRun, BatchRunKind, BatchRunStatus, ItemOutcome
from nightshift.domain.costs import Costs
from nightshift.domain.usage import USAGE_KEYS, Usage
from nightshift.store.copy import insert_rows
from nightshift.store.mapping import from_row, row_writer
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import batch_items, batch_run_requests, batch_runs

# The PostgreSQL channel pollers listen to (``NOTIFY``): a new run is queued, or a provider said a
# batch ended (``provider_batches.make_due``).
RUNS_CHANNEL = "nightshift_runs"


def to_run(row: Row[Any]) -> BatchRun:
    """Map a ``batch_runs`` row to the domain type."""
    return from_row(BatchRun, row, status=BatchRunStatus, kind=BatchRunKind)


_run_values = row_writer(BatchRun, batch_runs)


async def insert_run(conn: AsyncConnection, run: BatchRun) -> None:
    await conn.execute(insert(batch_runs).values(_run_values(run)))


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
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    statuses: Sequence[BatchRunStatus] = (),
    has_failures: bool | None = None,
    kind: BatchRunKind | None = None,
) -> list[BatchRun]:
    """A page of the organization's runs, with these statuses if any, of this kind if given;
    ``has_failures``: only runs that failed or in which some agent failed (True), or only the others (False)."""
    query = select(batch_runs).where(batch_runs.c.organization_id == org_id)
    if kind is not None:
        query = query.where(batch_runs.c.kind == kind.value)
    if statuses:
        query = query.where(batch_runs.c.status.in_([s.value for s in statuses]))
    if has_failures is not None:
        # Through the index of failed items alone (a literal, so that SQLite may use it).
        failed_agent = (
            select(batch_items.c.id)
            .where(
                batch_items.c.batch_run_id == batch_runs.c.id,
                batch_items.c.outcome == literal_column(f"'{ItemOutcome.FAILED.value}'"),
            )
            .exists()
        )
        failing = or_(batch_runs.c.status == BatchRunStatus.FAILED.value, failed_agent)
        query = query.where(failing if has_failures else ~failing)
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
    conn: AsyncConnection,
    run_id: str,
    status: BatchRunStatus,
    now: datetime,
    *,
    only_from: Iterable[BatchRunStatus],
    error: str | None = None,
) -> bool:
    """Move a run to ``status`` if it is in one of ``only_from``, with ``error`` if given (why it
    failed before its first step); True when it moved."""
    result = await conn.execute(
        update(batch_runs)
        .where(batch_runs.c.id == run_id, batch_runs.c.status.in_([s.value for s in only_from]))
        .values(
            status=status.value,
            updated_at=now,
            **({"completed_at": now} if status in TERMINAL_RUN_STATUSES else {}),
            **({"error": error} if error is not None else {}),
        )
    )
    return result.rowcount > 0


# Run by every pass of a poller, idle or not, so built once: building it cost about as much as
# running it (parameters ``now`` and ``limit``).
_CALLBACKS_DUE = (
    select(batch_runs)
    .where(
        batch_runs.c.callback_url.is_not(None),
        batch_runs.c.callback_sent_at.is_(None),
        batch_runs.c.status.in_([s.value for s in TERMINAL_RUN_STATUSES]),
        or_(batch_runs.c.callback_next_at.is_(None), batch_runs.c.callback_next_at <= bindparam("now")),
    )
    .limit(bindparam("limit"))
)


async def callbacks_due(conn: AsyncConnection, now: datetime, *, limit: int) -> list[BatchRun]:
    """Ended runs whose callback has not been delivered yet and is due for a (re)try."""
    return [to_run(r) for r in await conn.execute(_CALLBACKS_DUE, {"now": now, "limit": limit})]


async def claim_callback_attempt(conn: AsyncConnection, run: BatchRun, *, until: datetime) -> bool:
    """Take the next callback attempt of ``run`` (as last read) until ``until``; False when another
    process took it first (so that two server processes do not both send it)."""
    result = await conn.execute(
        update(batch_runs)
        .where(batch_runs.c.id == run.id, batch_runs.c.callback_attempts == run.callback_attempts)
        .values(callback_next_at=until, callback_attempts=run.callback_attempts + 1)
    )
    return result.rowcount > 0


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
    """Store how a callback attempt went (``sent_at`` set: no more attempts)."""
    await conn.execute(
        update(batch_runs)
        .where(batch_runs.c.id == run_id, batch_runs.c.callback_sent_at.is_(None))
        .values(
            callback_attempts=attempts,
            callback_sent_at=sent_at,
            callback_status_code=status_code,
            callback_error=error,
            callback_next_at=next_at,
        )
    )


async def queue_requests(conn: AsyncConnection, run_id: str, requests: Sequence[dict[str, Any]]) -> None:
    """Keep a new run's requests (as ``BatchRunRequest.to_json`` gives them) until its first step is
    written, in one statement; on PostgreSQL the pollers listening are told in the same transaction."""
    rows = [
        {
            "batch_run_id": run_id,
            "position": position,
            "agent_id": r["agent_id"],
            "messages": r["messages"],
            "max_steps": r["max_steps"],
            "client_tools": r.get("client_tools"),
            "answered": r.get("answered", False),
        }
        for position, r in enumerate(requests)
    ]
    await insert_rows(conn, batch_run_requests, rows)
    if conn.dialect.name == "postgresql":
        await conn.execute(text(f"NOTIFY {RUNS_CHANNEL}"))


async def any_queued(conn: AsyncConnection) -> bool:
    """Whether some run waits for its first step (one look at an index)."""
    return (await conn.scalar(select(batch_run_requests.c.batch_run_id).limit(1))) is not None


async def claim_queued_run(conn: AsyncConnection) -> BatchRun | None:
    """The oldest queued run no other transaction holds, locked until this one ends; None when
    there is none. Another poller skips it (PostgreSQL); SQLite serialises writers anyway.

    The caller then takes its requests (``take_queued_requests``): a poller that wrote its first
    step a moment before has taken them already.
    """
    row = (await conn.execute(_claim_queued_statement(conn.dialect.name))).first()
    return to_run(row) if row is not None else None


@functools.cache
def _claim_queued_statement(dialect: str) -> Select[Any]:
    """``claim_queued_run``'s statement for a dialect, built once (every pass of a poller runs it)."""
    queued = select(batch_run_requests.c.batch_run_id)
    query = (
        select(batch_runs)
        .where(batch_runs.c.id.in_(queued), batch_runs.c.status == BatchRunStatus.CREATED.value)
        .order_by(batch_runs.c.id)
        .limit(1)
    )
    if dialect == "postgresql":
        query = query.with_for_update(skip_locked=True, of=batch_runs)
    return query


async def take_queued_requests(conn: AsyncConnection, run_id: str) -> list[dict[str, Any]]:
    """Delete a queued run's requests and return them in their order (as ``BatchRunRequest.to_json``
    gives them), for its first step written in the same transaction; none when another poller
    took them first (or the run was cancelled).

    One write, whose deletion is the compare-and-set: SQLite begins a transaction only at its
    first write, so requests read before it could be another poller's already.
    """
    taken = await conn.execute(
        delete(batch_run_requests)
        .where(batch_run_requests.c.batch_run_id == run_id)
        .returning(
            batch_run_requests.c.position,
            batch_run_requests.c.agent_id,
            batch_run_requests.c.messages,
            batch_run_requests.c.max_steps,
            batch_run_requests.c.client_tools,
            batch_run_requests.c.answered,
        )
    )
    return [
        {"agent_id": a, "messages": m, "max_steps": n, "client_tools": c, "answered": bool(d)}
        for _, a, m, n, c, d in sorted(taken.all(), key=lambda r: r[0])
    ]


async def forget_queued_requests(conn: AsyncConnection, run_id: str) -> int:
    """Delete a run's queued requests (it was cancelled, or failed), which frees its agents; how
    many there were."""
    result = await conn.execute(delete(batch_run_requests).where(batch_run_requests.c.batch_run_id == run_id))
    return result.rowcount


async def runs_queuing_agent(conn: AsyncConnection, agent_id: str) -> set[str]:
    """The runs whose first step is not yet written that hold a request of the agent."""
    query = select(batch_run_requests.c.batch_run_id).where(batch_run_requests.c.agent_id == agent_id)
    return {str(run_id) for run_id in await conn.scalars(query.distinct())}


async def forget_queued_request(conn: AsyncConnection, run_id: str, agent_id: str) -> bool:
    """Delete the agent's request of a queued run (its part of the run was cancelled), which frees
    it and leaves it out of the run's queued agents; False when there was none (the run's first
    step was written meanwhile, or it ended)."""
    result = await conn.execute(
        delete(batch_run_requests).where(
            batch_run_requests.c.batch_run_id == run_id, batch_run_requests.c.agent_id == agent_id
        )
    )
    if result.rowcount == 0:
        return False
    await conn.execute(
        update(batch_runs).where(batch_runs.c.id == run_id).values(queued_agents=batch_runs.c.queued_agents - 1)
    )
    return True


async def is_queued(conn: AsyncConnection, run_id: str) -> bool:
    """Whether the run still holds queued requests (its first step is not written yet)."""
    query = select(batch_run_requests.c.batch_run_id).where(batch_run_requests.c.batch_run_id == run_id).limit(1)
    return (await conn.scalar(query)) is not None


async def costs_by_kind(conn: AsyncConnection, org_id: str) -> dict[BatchRunKind, KindCosts]:
    """The organization's runs, the agents they stepped, answered requests, their tokens and costs
    summed by the runs' kind, in one statement (every kind present, zero when it has no run)."""
    query = (
        select(
            batch_runs.c.kind,
            func.count(func.distinct(batch_runs.c.id)),
            func.count(func.distinct(batch_items.c.agent_id)),
            func.count(batch_items.c.usage),
            # A key no item holds (usage stored before it existed) sums to NULL: zero, as for each item.
            *(func.coalesce(func.sum(batch_items.c.usage[key].as_integer()), 0) for key in USAGE_KEYS),
            func.coalesce(func.sum(batch_items.c.cost_usd), 0.0),
            func.coalesce(func.sum(batch_items.c.cost_without_batch_usd), 0.0),
            func.coalesce(func.sum(batch_items.c.cache_savings_usd), 0.0),
        )
        .select_from(batch_runs.outerjoin(batch_items, batch_items.c.batch_run_id == batch_runs.c.id))
        .where(batch_runs.c.organization_id == org_id)
        .group_by(batch_runs.c.kind)
    )
    found = {kind: KindCosts(kind=kind) for kind in BatchRunKind}
    for kind, runs, agents, requests, *sums in await conn.execute(query):
        tokens, (usd, without_batch, cache) = sums[: len(USAGE_KEYS)], sums[len(USAGE_KEYS) :]
        usage = Usage.from_json({k: int(t) for k, t in zip(USAGE_KEYS, tokens, strict=True)}) if requests else None
        cost = Costs(usd=float(usd), without_batch_usd=float(without_batch), cache_savings_usd=float(cache))
        found[BatchRunKind(kind)] = KindCosts(
            kind=BatchRunKind(kind), runs=runs, agents=agents, requests=requests, usage=usage, cost=cost
        )
    return found
