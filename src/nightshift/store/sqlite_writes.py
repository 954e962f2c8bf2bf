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

from sqlalchemy.engine import URL

log = logging.getLogger(__name__)


def database_file(url: URL) -> Path | None:
    """The file of a SQLite database on disk; None for another database, or one in memory."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser().resolve()


@contextlib.contextmanager
def database_writes(url: URL) -> Iterator[asyncio.Event | None]:
    """An event set whenever a file of the SQLite database at ``url`` is written (the caller clears
    it), while the context is open, on the running event loop; None where the system does not tell.

    A commit of any process sets it, this one's included. So does an overflow of the kernel's
    queue of events, after which writes may have gone unreported.
    """
    path = database_file(url)
    if path is None or sys.platform != "linux":
        yield None
        return
    from inotify_simple import INotify, flags

    names = {path.name, f"{path.name}-wal", f"{path.name}-journal"}
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
        written = asyncio.Event()

        def read() -> None:
            if any(e.name in names or e.mask & flags.Q_OVERFLOW for e in notify.read(timeout=0)):
                written.set()

        loop = asyncio.get_running_loop()
        loop.add_reader(notify.fileno(), read)
        try:
            yield written
        finally:
            loop.remove_reader(notify.fileno())
