"""SQLite's write-ahead log copied into the database by a thread of the serving process, so that
no writer's commit does it.

SQLite copies its log back into the database file (a checkpoint) in the commit that takes the log
past ``wal_autocheckpoint`` pages, a thousand by default, with two fsyncs. The first step of a
run of a thousand agents writes nearly three thousand pages, so every such commit paid for a
checkpoint. It took 11-21 ms of a 120 ms write, where the commit alone takes 2 ms. Here the
serving process checkpoints once a second, PASSIVE, on a connection and thread of its own. A
passive checkpoint waits for no reader or writer and takes none of the database's locks that
they take, and its copying and fsyncs run while the writers go on. The connections' own limit
(``AUTOCHECKPOINT_PAGES``, set by ``store.db``) is raised to a backstop, reached only when no
serving process checkpoints (a command that writes alone), or if this thread falls far behind.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

# A connection's own checkpoint, as a backstop: at this many pages of log (256 MiB of 4 KiB pages).
AUTOCHECKPOINT_PAGES = 65_536
# How often the serving process checkpoints.
EVERY_SECONDS = 1.0


class Checkpoints:
    """A thread that checkpoints one SQLite database file every ``every`` seconds until ``stop``."""

    def __init__(self, path: str, *, every: float = EVERY_SECONDS) -> None:
        self._path = path
        self._every = every
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sqlite-checkpoints {path}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the checkpoint under way, if any (it is short: passive, and at most a second's log)."""
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            connection = sqlite3.connect(self._path, isolation_level=None)
        except sqlite3.Error as exc:  # the writers' backstop checkpoints instead
            log.warning("SQLite checkpoints of %s cannot run: %s", self._path, exc)
            return
        try:
            while not self._stopping.wait(self._every):
                try:
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # tried again next time; the writers' backstop holds meanwhile
                    log.warning("SQLite checkpoint of %s failed: %s", self._path, exc)
        finally:
            connection.close()


@asynccontextmanager
async def checkpointing(engine: AsyncEngine) -> AsyncIterator[None]:
    """Checkpoint ``engine``'s database while the block runs, if it is a SQLite file (nothing otherwise)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    checkpoints = Checkpoints(database)
    checkpoints.start()
    try:
        yield
    finally:
        await asyncio.to_thread(checkpoints.stop)
