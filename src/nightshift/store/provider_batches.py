"""Provider batches: leases, and one named compare-and-set function per state transition.

The state machine is ``domain.batches.ProviderBatchStatus``'s. A transition changes a batch only
if it is still in one of the states it may come from (``WHERE status IN (...)``) and returns
whether it did, so a second process that lost a race changes nothing. A stage that moves its
batch on succeeded, so every transition starts the count of the batch's failures again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    and_,
    bindparam,
    case,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batch_progress import BatchSummary
from nightshift.domain.batches import PollSnapshot, ProviderBatch, ProviderBatchStatus
from nightshift.store.batch_runs import RUNS_CHANNEL
from nightshift.store.bulk import in_ids
from nightshift.store.mapping import from_row, row_writer
from nightshift.store.tables import provider_batches

# What a claim may pick up: batches to submit, to poll, to apply, or to cancel at the provider.
CLAIMABLE = [
    ProviderBatchStatus.CREATED.value,
    ProviderBatchStatus.RUNNING.value,
    ProviderBatchStatus.ENDED.value,
    ProviderBatchStatus.CANCELLING.value,
]
_CLOSED = [ProviderBatchStatus.APPLIED.value, ProviderBatchStatus.CANCELLED.value]
_batch_values = row_writer(ProviderBatch, provider_batches)


def to_provider_batch(row: Row[Any]) -> ProviderBatch:
    """Map a ``provider_batches`` row to the domain type."""
    return from_row(ProviderBatch, row, status=ProviderBatchStatus, duplicates=tuple)


async def insert_provider_batches(
    conn: AsyncConnection,
    new: Sequence[ProviderBatch],
    *,
    items: Mapping[str, int],
    lease: tuple[str, datetime] | None = None,
) -> None:
    """Insert provider batches, due at once, optionally leased to ``(owner, expiry)``; ``items``
    is how many items each will hold (inserted next, in the same transaction), for its summary."""
    if not new:
        return
    owner, expires = lease if lease else (None, None)
    await conn.execute(
        insert(provider_batches),
        [
            {
                **_batch_values(b),
                "summary": BatchSummary.of_new_items(items[b.id]).to_json(),
                "next_poll_at": b.created_at,
                "lease_owner": owner,
                "lease_expires_at": expires,
            }
            for b in new
        ],
    )


async def get_provider_batch(conn: AsyncConnection, batch_id: str) -> ProviderBatch | None:
    row = (await conn.execute(select(provider_batches).where(provider_batches.c.id == batch_id))).first()
    return to_provider_batch(row) if row is not None else None


async def provider_batches_of_run(conn: AsyncConnection, run_id: str) -> list[ProviderBatch]:
    """The run's provider batches in step order."""
    return (await provider_batches_of_runs(conn, [run_id]))[run_id]


async def provider_batches_of_runs(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, list[ProviderBatch]]:
    """Each run's provider batches in step order (every id present), in one statement."""
    query = (
        select(provider_batches)
        .where(in_ids(conn, provider_batches.c.batch_run_id, run_ids))
        .order_by(provider_batches.c.step_number, provider_batches.c.id)
    )
    found: dict[str, list[ProviderBatch]] = {run_id: [] for run_id in run_ids}
    for row in await conn.execute(query):
        found[row.batch_run_id].append(to_provider_batch(row))
    return found


async def open_batches_of_run(conn: AsyncConnection, run_id: str) -> int:
    """How many provider batches of the run are not yet applied or cancelled."""
    query = select(func.count()).where(
        provider_batches.c.batch_run_id == run_id, provider_batches.c.status.not_in(_CLOSED)
    )
    return int(await conn.scalar(query) or 0)


async def known_provider_ids(conn: AsyncConnection, provider: str, ids: Sequence[str]) -> set[str]:
    """Which of these provider batch ids some provider batch of ours already holds."""
    if not ids:
        return set()
    query = select(provider_batches.c.provider_batch_id).where(
        provider_batches.c.provider == provider, in_ids(conn, provider_batches.c.provider_batch_id, ids)
    )
    return {str(i) for i in await conn.scalars(query)}


# Leases.


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
    one of ``endpoints`` (the provider base URLs this worker reaches, by provider).

    On PostgreSQL the candidates are locked with ``FOR UPDATE SKIP LOCKED`` so that concurrent
    pollers pick different batches; on both databases the update re-checks the lease, so a batch
    is never held by two owners.
    """
    candidates = _due_candidates(conn.dialect.name, tuple(sorted(endpoints.items())))
    ids = [str(i) for i in await conn.scalars(candidates, {"now": now, "limit": limit})]
    if not ids:
        return []
    claimed = await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id.in_(ids), _free(now))
        # The claimer polls the batch afresh: a webhook seen before this is seen by that poll.
        .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_seconds), woken_at=None)
        .returning(*provider_batches.c)
    )
    return [to_provider_batch(r) for r in claimed]


def _free(now: Any) -> ColumnElement[bool]:
    """A batch no one holds: never leased, or its lease expired before ``now``."""
    return or_(provider_batches.c.lease_owner.is_(None), provider_batches.c.lease_expires_at < now)


@functools.lru_cache(maxsize=16)
def _due_candidates(dialect: str, endpoints: tuple[tuple[str, str], ...]) -> Select[Any]:
    """``claim_due``'s first statement for a dialect and a worker's endpoints (the same for the
    life of a worker), built once: every pass of a poller runs it, idle or not (parameters ``now``
    and ``limit``)."""
    reachable = or_(
        provider_batches.c.endpoint.is_(None),  # written before endpoints were recorded
        *(
            and_(provider_batches.c.provider == provider, provider_batches.c.endpoint == endpoint)
            for provider, endpoint in endpoints
        ),
    )
    candidates = (
        select(provider_batches.c.id)
        .where(
            provider_batches.c.status.in_(CLAIMABLE),
            provider_batches.c.next_poll_at <= bindparam("now"),
            _free(bindparam("now")),
            reachable,
        )
        .order_by(provider_batches.c.next_poll_at)
        .limit(bindparam("limit"))
    )
    if dialect == "postgresql":
        candidates = candidates.with_for_update(skip_locked=True)
    return candidates


# Read after every pass of a poller (``Worker.next_pass_in``): built once.
_EARLIEST_DUE = select(func.min(provider_batches.c.next_poll_at)).where(provider_batches.c.status.in_(CLAIMABLE))


async def earliest_due(conn: AsyncConnection) -> datetime | None:
    """When the first batch a claim may pick up is due (None: none is), leased or not."""
    earliest: datetime | None = await conn.scalar(_EARLIEST_DUE)
    return earliest


async def make_due(conn: AsyncConnection, provider: str, provider_batch_id: str, now: datetime) -> bool:
    """The running batch of ``provider`` with this id due at once (its provider said it ended),
    and the pollers told on PostgreSQL; False when no such batch runs.

    A process may hold the batch meanwhile (submitting it, or polling it a moment too early):
    ``woken_at`` keeps it due when that process gives its lease back (see ``_release``)."""
    result = await conn.execute(
        update(provider_batches)
        .where(
            provider_batches.c.provider == provider,
            provider_batches.c.provider_batch_id == provider_batch_id,
            provider_batches.c.status == ProviderBatchStatus.RUNNING.value,
        )
        .values(next_poll_at=now, woken_at=now)
    )
    if result.rowcount and conn.dialect.name == "postgresql":
        await conn.execute(text(f"NOTIFY {RUNS_CHANNEL}"))
    return result.rowcount > 0


async def any_due(conn: AsyncConnection, now: datetime) -> bool:
    """Whether a batch no process holds is due (one look at an index)."""
    due = (
        select(provider_batches.c.id)
        .where(provider_batches.c.status.in_(CLAIMABLE), provider_batches.c.next_poll_at <= now, _free(now))
        .limit(1)
    )
    return (await conn.scalar(due)) is not None


async def recent_turnarounds(
    conn: AsyncConnection, *, latest: int, org_id: str | None = None
) -> dict[tuple[str, str | None], list[timedelta]]:
    """How long the ``latest`` batches that ended at their provider took (of one organization, or
    of all), from the last submit to the poll that saw the end, by provider and model (None: a
    batch of several models); batches that failed, were cancelled or taken over for a deadline
    are left out."""
    conditions: list[ColumnElement[bool]] = [
        provider_batches.c.status.in_((ProviderBatchStatus.ENDED.value, ProviderBatchStatus.APPLIED.value)),
        provider_batches.c.ended_at.is_not(None),
        provider_batches.c.submit_started_at.is_not(None),
        provider_batches.c.error.is_(None),
        provider_batches.c.takeover_at.is_(None),
    ]
    if org_id is not None:
        conditions.append(provider_batches.c.organization_id == org_id)
    ended = (
        select(
            provider_batches.c.provider,
            provider_batches.c.model,
            provider_batches.c.submit_started_at,
            provider_batches.c.ended_at,
        )
        .where(*conditions)
        .order_by(provider_batches.c.ended_at.desc())
        .limit(latest)
    )
    found: dict[tuple[str, str | None], list[timedelta]] = {}
    for provider, model, submitted, ended_at in await conn.execute(ended):
        found.setdefault((provider, model), []).append(ended_at - submitted)
    return found


async def renew_lease(conn: AsyncConnection, batch_id: str, owner: str, expires_at: datetime) -> bool:
    """Push back the expiry of ``owner``'s lease on a batch; False when ``owner`` no longer holds it."""
    result = await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id, provider_batches.c.lease_owner == owner)
        .values(lease_expires_at=expires_at)
    )
    return result.rowcount > 0


async def release(conn: AsyncConnection, batch_id: str, owner: str, *, next_poll_at: datetime | None) -> None:
    """Give up ``owner``'s lease on a batch; it is due again at ``next_poll_at`` (None: never)."""
    await _release(conn, batch_id, owner, next_poll_at=next_poll_at, values={})


async def release_all_of(conn: AsyncConnection, owner_prefix: str, now: datetime) -> int:
    """Give up every lease whose owner starts with ``owner_prefix`` (one process's, at shutdown).

    The batches still open are due at ``now``, so another process takes them over at once instead
    of when the leases expire; closed ones stay never due. Returns how many leases were given up.
    """
    held = provider_batches.c.lease_owner.startswith(owner_prefix, autoescape=True)
    result = await conn.execute(
        update(provider_batches)
        .where(held)
        .values(
            lease_owner=None,
            lease_expires_at=None,
            next_poll_at=case((provider_batches.c.status.in_(CLAIMABLE), now), else_=provider_batches.c.next_poll_at),
        )
    )
    return result.rowcount


async def record_poll(
    conn: AsyncConnection,
    batch_id: str,
    owner: str,
    snapshot: PollSnapshot,
    *,
    next_poll_at: datetime,
    tail_at: datetime | None = None,
    takeover_at: datetime | None = None,
) -> None:
    """A poll found the batch still running: store what it saw (when only a tail of its requests
    was left, when its take-over started: kept once set), give up the lease."""
    values: dict[str, Any] = {
        "provider_status": snapshot.provider_status,
        "request_counts": snapshot.request_counts,
        "polled_at": snapshot.polled_at,
        "error": None,
        "failures": 0,
    }
    if tail_at is not None:
        values["tail_at"] = func.coalesce(provider_batches.c.tail_at, tail_at)
    if takeover_at is not None:
        values["takeover_at"] = func.coalesce(provider_batches.c.takeover_at, takeover_at)
    await _release(conn, batch_id, owner, next_poll_at=next_poll_at, values=values)


async def count_taken_over(conn: AsyncConnection, batch_id: str, count: int) -> None:
    """``count`` more of the batch's requests were answered through the normal API."""
    await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id)
        .values(taken_over=provider_batches.c.taken_over + count)
    )


async def record_failure(
    conn: AsyncConnection, batch_id: str, owner: str, *, failures: int, error: str, next_poll_at: datetime
) -> None:
    """The batch's stage failed (again): store the count and the reason, give up the lease."""
    values = {"failures": failures, "error": error}
    await _release(conn, batch_id, owner, next_poll_at=next_poll_at, values=values)


async def _release(
    conn: AsyncConnection, batch_id: str, owner: str, *, next_poll_at: datetime | None, values: dict[str, Any]
) -> None:
    """Give up the lease; the batch is due at ``next_poll_at``, or earlier when another process
    made it due while it was held (a webhook, a cancel: ``woken_at``). A batch never due again
    stays so: it is closed."""
    due: Any = next_poll_at
    if next_poll_at is not None:
        when = literal(next_poll_at, provider_batches.c.next_poll_at.type)
        woken = provider_batches.c.woken_at
        due = case((woken < when, woken), else_=when)
    await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id, provider_batches.c.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None, next_poll_at=due, **values)
    )


# Transitions (the machine of ProviderBatchStatus).


async def mark_running(
    conn: AsyncConnection, batch_id: str, provider_batch_id: str, now: datetime, *, next_poll_at: datetime
) -> bool:
    """created -> running: the provider holds it under ``provider_batch_id``."""
    return await _transition(
        conn,
        batch_id,
        ProviderBatchStatus.RUNNING,
        now,
        only_from=(ProviderBatchStatus.CREATED,),
        values={"provider_batch_id": provider_batch_id, "error": None, "next_poll_at": next_poll_at},
    )


async def mark_ended(
    conn: AsyncConnection,
    batch_id: str,
    now: datetime,
    *,
    only_from: ProviderBatchStatus,
    snapshot: PollSnapshot | None = None,
    error: str | None = None,
) -> bool:
    """created | running -> ended: every item's result is stored in the same transaction.

    From created, it ended without reaching the provider (refused, or nothing to send).
    """
    values: dict[str, Any] = {"error": error}
    if snapshot is not None:
        values |= {
            "provider_status": snapshot.provider_status,
            "request_counts": snapshot.request_counts,
            "polled_at": snapshot.polled_at,
            "ended_at": now,
        }
    return await _transition(conn, batch_id, ProviderBatchStatus.ENDED, now, only_from=(only_from,), values=values)


async def mark_applied(conn: AsyncConnection, batch_id: str, now: datetime, *, error: str | None = None) -> bool:
    """ended -> applied: its results were applied to its agents (or given up, with ``error``)."""
    values = {"error": error} if error is not None else {}
    return await _transition(
        conn, batch_id, ProviderBatchStatus.APPLIED, now, only_from=(ProviderBatchStatus.ENDED,), values=values
    )


async def mark_cancelling(
    conn: AsyncConnection,
    batch_id: str,
    now: datetime,
    *,
    only_from: Iterable[ProviderBatchStatus],
    provider_batch_id: str | None = None,
    lease: tuple[str, datetime] | None = None,
) -> bool:
    """-> cancelling: its run was cancelled and the provider must be told, due at once.

    ``provider_batch_id`` records an id learnt late (a submission that ended after the cancel);
    ``lease`` reserves it for the caller, who tells the provider at once.
    """
    # A poller may hold it, polling it: ``woken_at`` keeps it due when that poller lets go.
    values: dict[str, Any] = {"next_poll_at": now, "woken_at": now}
    if provider_batch_id is not None:
        values["provider_batch_id"] = provider_batch_id
    if lease is not None:
        values |= {"lease_owner": lease[0], "lease_expires_at": lease[1]}
    return await _transition(
        conn, batch_id, ProviderBatchStatus.CANCELLING, now, only_from=tuple(only_from), values=values
    )


async def mark_cancelled(
    conn: AsyncConnection,
    batch_id: str,
    now: datetime,
    *,
    only_from: Iterable[ProviderBatchStatus],
    error: str | None = None,
) -> bool:
    """-> cancelled: the provider was told (or never had it); its results are never applied."""
    values = {"error": error} if error is not None else {}
    return await _transition(
        conn, batch_id, ProviderBatchStatus.CANCELLED, now, only_from=tuple(only_from), values=values
    )


async def _transition(
    conn: AsyncConnection,
    batch_id: str,
    to: ProviderBatchStatus,
    now: datetime,
    *,
    only_from: Sequence[ProviderBatchStatus],
    values: dict[str, Any],
) -> bool:
    result = await conn.execute(
        update(provider_batches)
        .where(provider_batches.c.id == batch_id, provider_batches.c.status.in_([s.value for s in only_from]))
        .values(status=to.value, updated_at=now, failures=0, **values)
    )
    return result.rowcount > 0
