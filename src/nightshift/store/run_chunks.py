"""A background run's stored stream (``agent_run_chunks``, see ``domain.run_chunks``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.run_chunks import ChunkKind, RunChunk
from nightshift.store.agent_runs import OPEN
from nightshift.store.tables import agent_run_chunks, agent_runs


async def append(conn: AsyncConnection, run_id: str, chunks: Sequence[RunChunk], *, lease_until: datetime) -> bool:
    """Add ``chunks`` to the run's stream and renew its lease, only while the run is open.

    Returns False, writing nothing, once the run has ended: a stream whose run was ended by
    someone else (a cancel, a failure found) stays as it was, so that its end, made from the run
    as it is read, never changes. The run's row is updated first, which holds it (PostgreSQL's
    row lock, SQLite's write lock) until the transaction ends: a cancel waits for the chunks, or
    the chunks see the cancel.
    """
    held = await conn.execute(
        update(agent_runs)
        .where(agent_runs.c.id == run_id, agent_runs.c.status.in_(OPEN))
        .values(lease_until=lease_until)
    )
    if held.rowcount == 0:
        return False
    if chunks:
        rows = [{"run_id": run_id, "seq_id": c.seq_id, "kind": c.kind.value, "data": c.data} for c in chunks]
        await conn.execute(insert(agent_run_chunks), rows)
    return True


async def read(conn: AsyncConnection, run_id: str, *, after: int, limit: int) -> list[RunChunk]:
    """Up to ``limit`` chunks of the run's stream after ``seq_id`` ``after``, in order."""
    query = (
        select(agent_run_chunks.c.seq_id, agent_run_chunks.c.kind, agent_run_chunks.c.data)
        .where(agent_run_chunks.c.run_id == run_id, agent_run_chunks.c.seq_id > after)
        .order_by(agent_run_chunks.c.seq_id)
        .limit(limit)
    )
    return [RunChunk(seq_id=s, kind=ChunkKind(k), data=d) for s, k, d in await conn.execute(query)]


async def last_chunk(conn: AsyncConnection, run_id: str) -> tuple[int, ChunkKind] | None:
    """The number and kind of the run's last stored chunk (None: none stored)."""
    query = (
        select(agent_run_chunks.c.seq_id, agent_run_chunks.c.kind)
        .where(agent_run_chunks.c.run_id == run_id)
        .order_by(agent_run_chunks.c.seq_id.desc())
        .limit(1)
    )
    row = (await conn.execute(query)).first()
    return (int(row.seq_id), ChunkKind(row.kind)) if row is not None else None
