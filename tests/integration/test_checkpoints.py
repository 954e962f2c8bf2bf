"""SQLite's log is copied into the database by the serving process's thread (``store.checkpoints``),
not by the commits that write it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conftest import POSTGRES_URL
from nightshift.store.checkpoints import Checkpoints, checkpointing
from nightshift.store.db import create_engine

ROW = "x" * 4000  # about a page each


def _checkpointing(path: Path) -> bool:
    """Whether a checkpoint thread of that database runs."""
    return any(t.name == f"sqlite-checkpoints {path}" for t in threading.enumerate())


def _log_salt(path: Path) -> bytes:
    """The salt of the database's log, which SQLite changes each time a writer starts the log
    again from its beginning (which it does once a checkpoint has copied all of it)."""
    with open(f"{path}-wal", "rb") as log:
        return log.read(24)[16:24]


async def _write(engine: AsyncEngine, rows: int) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO scratch VALUES (:value)"), [{"value": ROW}] * rows)


async def test_commits_leave_the_log_to_the_checkpoint_thread(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    engine = create_engine(f"sqlite:///{path}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE scratch (value TEXT)"))
        await _write(engine, 600)
        salt = _log_salt(path)
        # Past SQLite's default of 1,000 pages, where a commit would have copied the log and the
        # next writer started it again: here the log grows.
        await _write(engine, 600)
        await _write(engine, 600)
        assert _log_salt(path) == salt
        assert (path.parent / "log.db-wal").stat().st_size > 1_800 * 4096

        checkpoints = Checkpoints(str(path), every=0.05)
        checkpoints.start()
        writes = 0
        try:
            while _log_salt(path) == salt and writes < 100:
                await asyncio.sleep(0.05)
                await _write(engine, 1)
                writes += 1
        finally:
            checkpoints.stop()
        assert _log_salt(path) != salt  # the thread copied the whole log: a writer started it again
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM scratch"))).scalar() == 1_800 + writes
    finally:
        await engine.dispose()


async def test_the_thread_runs_while_the_block_does_and_only_for_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "file.db"
    engine = create_engine(f"sqlite:///{path}")
    try:
        async with checkpointing(engine):
            assert _checkpointing(path)
        assert not _checkpointing(path)
    finally:
        await engine.dispose()
    before = threading.active_count()
    for url in ("sqlite://", POSTGRES_URL):
        other = create_engine(url)
        try:
            async with checkpointing(other):
                assert threading.active_count() == before
        finally:
            await other.dispose()
