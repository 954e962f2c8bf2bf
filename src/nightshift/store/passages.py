"""Archival memory: passages an agent saved, searched with full-text search."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Row, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.passages import Passage
from nightshift.store.bulk import count_per_agent
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


async def search_passages(
    conn: AsyncConnection, agent_id: str, query: str, *, limit: int, offset: int
) -> list[Passage]:
    """The agent's passages matching ``query``, best first."""
    ranked = ranked_select(conn.dialect.name, passages, passages.c.text, query)
    if ranked is None:
        return []
    statement = ranked.where(passages.c.agent_id == agent_id).limit(limit).offset(offset)
    return [to_passage(r) for r in await conn.execute(statement)]
