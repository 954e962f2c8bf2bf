"""Writes to a SQLite database's files, as Linux reports them (inotify), so that a process that
waits for another one's commit is woken by it rather than by a timer.

A commit appends to the database's write-ahead log (the ``-wal`` file beside it; SQLite runs in
WAL mode here), and a checkpoint writes the database file itself; both are seen as writes in
their folder, which is watched rather than the files, since SQLite creates and deletes the log.
The shared-memory index (``-shm``) is written through a mapping, which inotify does not report,
so readers wake nobody. Where the system does not tell (not Linux, an in-memory database, no
inotify instance left for this user), the caller looks on a timer as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

log = logging.getLogger(__name__)


def database_file(url: URL) -> Path | None:
    """The file of a SQLite database on disk; None for another database, or one in memory."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser().resolve()


class DatabaseWrites:
    """The writes to one database's files since the last ``forget``.

    The kernel keeps the events until they are read, and merges a run of identical ones (a
    transaction's many writes to the log), so nothing is read, and the event loop is not woken,
    while nobody waits: a poller writing a step of 10,000 agents would otherwise wake its own
    loop at each page it writes.
    """

    def __init__(self, notify: Any, names: set[str], overflow: int) -> None:
        self._notify, self._names, self._overflow = notify, names, overflow

    def forget(self) -> None:
        """Drop the writes reported so far (the caller is about to look at the database)."""
        self._notify.read(timeout=0)

    async def next(self, timeout: float) -> None:  # noqa: ASYNC109 (the caller's own deadline)
        """Return once a file of the database was written since the last ``forget`` (this process's
        commits included; an overflow of the kernel's queue counts as one), or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        fd = self._notify.fileno()
        while (left := deadline - loop.time()) > 0:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _resolve, readable)
            try:
                # Not ``wait_for``: in Python 3.11 a cancellation that comes as the file is written
                # is lost there, and the watch would go on after its poller was told to stop.
                async with asyncio.timeout(left):
                    await readable
            except TimeoutError:
                return
            finally:
                loop.remove_reader(fd)
            if any(e.name in self._names or e.mask & self._overflow for e in self._notify.read(timeout=0)):
                return


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@contextlib.contextmanager
def database_writes(url: URL) -> Iterator[DatabaseWrites | None]:
    """The writes to the files of the SQLite database at ``url`` while the context is open; None
    where the system does not tell."""
    path = database_file(url)
    if path is None or sys.platform != "linux":
        yield None
        return
    from inotify_simple import INotify, flags

    try:
        notify = INotify(nonblocking=True)
    except OSError as exc:  # fs.inotify.max_user_instances reached
        log.warning("cannot watch the database's files for commits (%s); looking on a timer instead", exc)
        yield None
        return
    with notify:
        try:
            notify.add_watch(path.parent, flags.MODIFY | flags.CREATE | flags.MOVED_TO)
        except OSError as exc:
            log.warning("cannot watch %s for commits (%s); looking on a timer instead", path.parent, exc)
            yield None
            return
        names = {path.name, f"{path.name}-wal", f"{path.name}-journal"}
        yield DatabaseWrites(notify, names, flags.Q_OVERFLOW)
