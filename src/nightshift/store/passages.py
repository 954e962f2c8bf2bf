"""Archival memory: passages an agent saved, searched with full-text search."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, Select, Text, bindparam, delete, exists, func, insert, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.passages import Passage, PassageFilter
from nightshift.store.bulk import count_per_agent, in_ids
from nightshift.store.pagination import Page, paginate_by_time
from nightshift.store.search import ranked_select
from nightshift.store.tables import passages


def to_passage(row: Row[Any]) -> Passage:
    """Map a ``passages`` row to the domain type."""
    return Passage(
        id=row.id,
        organization_id=row.organization_id,
        agent_id=row.agent_id,
        text=row.text,
        tags=tuple(row.tags),
        created_at=row.created_at,
    )


async def insert_passages(conn: AsyncConnection, new: Sequence[Passage]) -> None:
    """Insert passages of any number of agents in one statement."""
    if new:
        await conn.execute(
            insert(passages),
            [
                {
                    "id": p.id,
                    "organization_id": p.organization_id,
                    "agent_id": p.agent_id,
                    "text": p.text,
                    "tags": list(p.tags),
                    "created_at": p.created_at,
                }
                for p in new
            ],
        )


async def count_passages(conn: AsyncConnection, agent_ids: Iterable[str]) -> dict[str, int]:
    """Number of passages per agent, in one query."""
    return await count_per_agent(conn, passages, agent_ids)


async def list_passages(
    conn: AsyncConnection, agent_id: str, page: Page, *, search: str | None = None
) -> list[Passage]:
    """A page of the agent's passages by creation time (then id), in one statement.

    ``search`` keeps the passages holding any of its words, with the full-text search of
    :func:`search_passages`, in the listing's order; a search without words finds nothing.
    """
    query: Select[Any] = select(passages)
    if search:
        ranked = ranked_select(conn.dialect.name, passages, passages.c.text, search)
        if ranked is None:
            return []
        query = ranked.order_by(None)
    query = query.where(passages.c.agent_id == agent_id)
    scope = passages.c.agent_id == agent_id
    statement = paginate_by_time(query, passages.c.created_at, passages.c.id, page, scope=scope)
    return [to_passage(r) for r in await conn.execute(statement)]


async def delete_passage(conn: AsyncConnection, agent_id: str, passage_id: str) -> bool:
    """Delete one of the agent's passages; False when the agent has no passage of that id."""
    result = await conn.execute(delete(passages).where(passages.c.id == passage_id, passages.c.agent_id == agent_id))
    return bool(result.rowcount)


async def search_passages(
    conn: AsyncConnection,
    agent_id: str,
    query: str,
    *,
    limit: int,
    offset: int = 0,
    only: PassageFilter | None = None,
) -> list[Passage]:
    """The agent's passages matching ``query``, best first, among those ``only`` lets through."""
    ranked = ranked_select(conn.dialect.name, passages, passages.c.text, query)
    if ranked is None:
        return []
    statement = ranked.where(passages.c.agent_id == agent_id, *_filtered(conn, only)).limit(limit).offset(offset)
    return [to_passage(r) for r in await conn.execute(statement)]


def _filtered(conn: AsyncConnection, only: PassageFilter | None) -> list[ColumnElement[bool]]:
    """The conditions of a filter: its tags (any or all of them) and its time range, both ends kept."""
    if only is None:
        return []
    conditions = []
    if only.tags:
        conditions.append(_tagged(conn, only.tags, match_all=only.match_all_tags))
    if only.start is not None:
        conditions.append(passages.c.created_at >= only.start)
    if only.end is not None:
        conditions.append(passages.c.created_at <= only.end)
    return conditions


def _tagged(conn: AsyncConnection, tags: Sequence[str], *, match_all: bool) -> ColumnElement[bool]:
    """Passages holding any of ``tags`` (or all of them), with one bound parameter whatever their number.

    The tags are a JSON array: PostgreSQL asks JSONB's ``?|`` / ``?&``; SQLite reads the array
    with ``json_each``.
    """
    wanted = list(dict.fromkeys(tags))
    if conn.dialect.name == "postgresql":
        operator = "?&" if match_all else "?|"
        held: ColumnElement[bool] = passages.c.tags.op(operator)(bindparam(None, wanted, type_=ARRAY(Text)))
        return held
    each = func.json_each(passages.c.tags).table_valued("value").alias("held_tag")
    if match_all:
        found = select(func.count(func.distinct(each.c.value))).where(in_ids(conn, each.c.value, wanted))
        return found.scalar_subquery() == len(wanted)
    return exists(select(each.c.value).where(in_ids(conn, each.c.value, wanted)))
