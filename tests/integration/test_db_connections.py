"""The engine's connections: SQLite statements in one hop to its thread, PostgreSQL pings only
when idle, a pool that keeps its connections, reads outside transactions."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.store.db import create_engine, opened, read_only
from nightshift.store.sqlite_driver import OneHopConnection


async def _hops(conn: Any) -> int:
    """Calls made so far on the thread of this SQLite connection."""
    raw = await conn.get_raw_connection()
    adapted = raw.dbapi_connection
    assert isinstance(adapted, OneHopConnection)
    return adapted._sent


async def test_sqlite_statement_is_one_hop_and_a_read_needs_no_commit(tmp_path: Path) -> None:
    async with opened(f"sqlite:///{tmp_path / 'hops.db'}") as engine:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
        async with engine.begin() as conn:
            before = await _hops(conn)
            inserted = await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
            many = await conn.execute(text("INSERT INTO t (name) VALUES (:n)"), [{"n": "b"}, {"n": "c"}])
            rows = (await conn.execute(text("SELECT id, name FROM t ORDER BY id"))).all()
            assert await _hops(conn) - before == 3  # one per statement, executemany included
        assert (inserted.lastrowid, many.rowcount) == (1, 2)
        assert rows == [(1, "a"), (2, "b"), (3, "c")]
        async with engine.begin() as conn:
            before = await _hops(conn)
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 3
        async with engine.connect() as conn:
            # The read's commit and the pool's rollback made no call: SQLite had no transaction open.
            assert await _hops(conn) - before == 1


async def test_sqlite_failed_write_rolls_back_and_a_write_commits(tmp_path: Path) -> None:
    async with opened(f"sqlite:///{tmp_path / 'tx.db'}") as engine:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
            await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t (name) VALUES ('b')"))
                await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))  # not unique
        async with engine.connect() as conn:
            names = (await conn.execute(text("SELECT name FROM t ORDER BY name"))).scalars().all()
            assert names == ["a"]  # 'b' went with the failed transaction
            await conn.execute(text("INSERT INTO t (name) VALUES ('c')"))
            await conn.rollback()
            await conn.execute(text("INSERT INTO t (name) VALUES ('d')"))
            await conn.commit()
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT name FROM t ORDER BY name"))).scalars().all() == ["a", "d"]


def test_a_sqlite_connection_cancelled_as_it_opens_leaves_no_thread_behind(tmp_path: Path) -> None:
    """A task cancelled while its SQLite connection is being opened on the connection's thread (a
    server stopped as soon as it started) ends once that connection is opened and closed again:
    no thread is left waiting for statements, nor answering an event loop that has closed."""
    before = set(threading.enumerate())

    async def cancelled_as_it_opens() -> None:
        engine = create_engine(f"sqlite:///{tmp_path / 'opening.db'}")
        try:
            opening = asyncio.create_task(engine.connect().start())
            await asyncio.sleep(0)  # the task has handed the opening to the connection's thread
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
        finally:
            await engine.dispose()

    asyncio.run(cancelled_as_it_opens())
    started = [thread for thread in threading.enumerate() if thread not in before]
    for thread in started:
        thread.join(timeout=5)
    assert [thread for thread in started if thread.is_alive()] == []


async def _terminate(db_url: str, pid: int) -> None:
    """End a PostgreSQL server process, as a restart or an idle timeout would, from another connection."""
    async with opened(db_url) as admin, admin.connect() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})


async def _backend_pid(engine: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_postgres_connection_killed_while_idle_is_replaced(db_url: str) -> None:
    """A pooled connection whose server process ended while it sat idle is found dead by the
    ping at checkout and replaced: the next request does not fail."""
    engine = create_engine(db_url, idle_ping_seconds=0)
    try:
        pid = await _backend_pid(engine)
        await _terminate(db_url, pid)
        assert await _backend_pid(engine) != pid
    finally:
        await engine.dispose()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_postgres_connection_in_use_is_not_pinged(db_url: str) -> None:
    """Within ``idle_ping_seconds`` of its last use a connection is handed out as it is: killed
    meanwhile, the request on it fails once, and the pool then replaces it."""
    engine = create_engine(db_url, idle_ping_seconds=3600)
    try:
        pid = await _backend_pid(engine)
        await _terminate(db_url, pid)
        with pytest.raises(DBAPIError) as failed:
            await _backend_pid(engine)
        assert failed.value.connection_invalidated
        assert await _backend_pid(engine) != pid
    finally:
        await engine.dispose()


async def test_pool_keeps_its_connections_and_makes_the_rest_wait(db_url: str) -> None:
    """More requests at once than the pool holds wait for a pooled connection: none is opened
    beyond it, to be closed when given back (PostgreSQL: a new backend, type lookups and every
    statement prepared again; SQLite: a thread and the schema parsed; paid per request by a busy
    server), and the same connections serve the next round."""
    engine = create_engine(db_url, pool_size=3)

    async def held_for_a_while() -> int:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
            # Holds the connection while the other tasks ask the pool for theirs: what is measured is
            # the pool's real wait, which no clock of the server's decides.
            await asyncio.sleep(0.05)
            return id((await conn.get_raw_connection()).dbapi_connection)

    try:
        first = set(await asyncio.gather(*(held_for_a_while() for _ in range(10))))
        second = set(await asyncio.gather(*(held_for_a_while() for _ in range(10))))
        assert len(first) == 3
        assert second == first
    finally:
        await engine.dispose()


async def test_reads_outside_a_transaction_leave_writes_atomic(engine: AsyncEngine) -> None:
    """``read_only`` shares the pool: a connection that served a read (in autocommit on
    PostgreSQL) serves a write next in a transaction again, which a failure rolls back whole."""
    reads = read_only(engine)
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (name TEXT UNIQUE)"))
    for _ in range(3):
        async with reads.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 0
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
                await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
    async with reads.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 0
