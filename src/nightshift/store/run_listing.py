"""One listing over agent runs and batch runs, as Letta's ``GET /v1/runs`` shows both.

The two tables' ids have different prefixes, so the listing orders by creation time, then agent
runs before batch runs, then id; a cursor is an id of either table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from sqlalchemy import ColumnElement, Table, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agent_runs import AgentRun
from nightshift.domain.batches import BatchRun
from nightshift.store import agent_runs as agent_run_store
from nightshift.store import batch_runs as batch_run_store
from nightshift.store.pagination import MAX_PAGE
from nightshift.store.tables import agent_runs, batch_items, batch_runs

# Rank of each table among runs created at the same instant.
_RANK = {"agent_runs": 0, "batch_runs": 1}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """What ``GET /v1/runs`` filters on; a batch run has no stop reason and counts as background."""

    agent_ids: Sequence[str] = ()
    statuses: Sequence[str] = ()
    background: bool | None = None
    stop_reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedBatchRun:
    """A batch run in the listing, with one of its agents (the filtered one, or its first)."""

    run: BatchRun
    agent_id: str | None


Listed: TypeAlias = AgentRun | ListedBatchRun


def _key(created_at: datetime, table: str, run_id: str) -> tuple[datetime, int, str]:
    return (created_at, _RANK[table], run_id)


async def _cursor(conn: AsyncConnection, org_id: str, run_id: str) -> tuple[datetime, int, str] | None:
    for table in (agent_runs, batch_runs):
        query = select(table.c.created_at).where(table.c.organization_id == org_id, table.c.id == run_id)
        created = await conn.scalar(query)
        if created is not None:
            return _key(created, table.name, run_id)
    return None


def _beyond(table: Table, cursor: tuple[datetime, int, str], later: bool) -> ColumnElement[bool]:
    """Rows of ``table`` after (``later``) or before the cursor in the listing's order."""
    created, rank, run_id = cursor
    own = _RANK[table.name]
    if later:
        same_instant = table.c.id > run_id if own == rank else (table.c.id.is_not(None) if own > rank else None)
        newer = table.c.created_at > created
    else:
        same_instant = table.c.id < run_id if own == rank else (table.c.id.is_not(None) if own < rank else None)
        newer = table.c.created_at < created
    if same_instant is None:
        return newer
    return or_(newer, and_(table.c.created_at == created, same_instant))


async def list_runs(
    conn: AsyncConnection,
    org_id: str,
    where: RunFilter,
    *,
    after: str | None = None,
    before: str | None = None,
    limit: int | None = 50,
    ascending: bool = False,
) -> list[Listed]:
    """A page of both kinds of run, newest first unless ``ascending``."""
    size = MAX_PAGE if limit is None else max(1, min(limit, MAX_PAGE))
    walk_back = before is not None and after is None
    later = ascending != walk_back  # the direction rows are taken in
    bounds: list[tuple[str, bool]] = []
    if after is not None:
        bounds.append((after, ascending))
    if before is not None:
        bounds.append((before, not ascending))
    cursors: list[tuple[tuple[datetime, int, str], bool]] = []
    for run_id, is_later in bounds:
        cursor = await _cursor(conn, org_id, run_id)
        if cursor is None:
            return []
        cursors.append((cursor, is_later))
    found: list[tuple[tuple[datetime, int, str], Listed]] = []
    for table in (agent_runs, batch_runs):
        if table is batch_runs and (where.background is False or where.stop_reason is not None):
            continue
        query = select(table).where(table.c.organization_id == org_id, *(_beyond(table, c, lt) for c, lt in cursors))
        if where.statuses:
            query = query.where(table.c.status.in_(list(where.statuses)))
        query = _filtered(query, table, where)
        order = (table.c.created_at, table.c.id) if later else (table.c.created_at.desc(), table.c.id.desc())
        rows = list(await conn.execute(query.order_by(*order).limit(size)))
        if table is agent_runs:
            for row in rows:
                run = agent_run_store.to_run(row)
                found.append((_key(run.created_at, table.name, run.id), run))
        else:
            batch = [batch_run_store.to_run(row) for row in rows]
            agents = await first_agents(conn, [b.id for b in batch], where.agent_ids)
            for b in batch:
                found.append((_key(b.created_at, table.name, b.id), ListedBatchRun(run=b, agent_id=agents.get(b.id))))
    found.sort(key=lambda pair: pair[0], reverse=not later)
    page = [listed for _, listed in found[:size]]
    return page[::-1] if walk_back else page


def _filtered(query: Any, table: Table, where: RunFilter) -> Any:
    if table is agent_runs:
        if where.agent_ids:
            query = query.where(agent_runs.c.agent_id.in_(list(where.agent_ids)))
        if where.background is not None:
            query = query.where(agent_runs.c.background == where.background)
        if where.stop_reason is not None:
            query = query.where(agent_runs.c.stop_reason == where.stop_reason)
        return query
    if where.agent_ids:
        with_agent = select(batch_items.c.batch_run_id).where(batch_items.c.agent_id.in_(list(where.agent_ids)))
        query = query.where(batch_runs.c.id.in_(with_agent))
    return query


async def first_agents(conn: AsyncConnection, run_ids: Sequence[str], wanted: Sequence[str]) -> dict[str, str]:
    """One agent per batch run: among ``wanted`` if given, the lowest id."""
    if not run_ids:
        return {}
    query = select(batch_items.c.batch_run_id, func.min(batch_items.c.agent_id)).where(
        batch_items.c.batch_run_id.in_(list(run_ids))
    )
    if wanted:
        query = query.where(batch_items.c.agent_id.in_(list(wanted)))
    rows = await conn.execute(query.group_by(batch_items.c.batch_run_id))
    return {str(run_id): str(agent_id) for run_id, agent_id in rows}
