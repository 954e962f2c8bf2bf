"""SQLAlchemy's aiosqlite driver with one hop to SQLite's thread per statement instead of four.

aiosqlite runs each call on the connection's own thread: SQLAlchemy's adapter makes four such
calls per statement (open a cursor, execute, fetch the rows, close the cursor) and one each for
the commit and for the rollback with which the pool takes a connection back. Each hop (a queue
put, a thread wake-up, the result handed back through the event loop's self-pipe) costs more CPU
than a read of a few indexed rows: reading one agent (three statements) made fourteen of them.
Here a statement is one hop (the four steps run together on the thread), and a commit or a
rollback with no transaction open makes none (SQLite would do nothing with it: Python's sqlite3
opens a transaction only before a write, so a read never has one).

Used by :func:`nightshift.store.db.create_engine` as the DBAPI module of the ``sqlite+aiosqlite``
dialect; the URLs, the dialect and everything above the DBAPI are SQLAlchemy's own. Server-side
cursors (``stream_results``, unused here) keep SQLAlchemy's adapter.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

T = TypeVar("T")

# What a statement leaves behind: the cursor's description, rowcount and lastrowid, and its rows.
_Outcome = tuple[Any, int, int | None, list[Any] | None]


def _run(conn: sqlite3.Connection, operation: str, parameters: Any) -> _Outcome:
    cursor = conn.cursor()
    try:
        cursor.execute(operation, () if parameters is None else parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else None
        return description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


def _run_many(conn: sqlite3.Connection, operation: str, parameters: Sequence[Any]) -> _Outcome:
    cursor = conn.cursor()
    try:
        cursor.executemany(operation, parameters)
        return cursor.description, cursor.rowcount, cursor.lastrowid, None
    finally:
        cursor.close()


class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
    """A cursor whose statement runs, is fetched and closed on SQLite's thread in one hop."""

    __slots__ = ("_lastrowid", "_outcome_description", "_rowcount", "arraysize")

    def __init__(self, adapt_connection: Any) -> None:
        super().__init__(adapt_connection)
        self._outcome_description: Any = None
        self._rowcount = -1
        self._lastrowid: int | None = None
        self.arraysize = 1  # DBAPI's default for fetchmany()

    def _make_new_cursor(self, connection: Any) -> Any:
        return None  # no sqlite3 cursor here: each statement opens and closes its own on the thread

    def _aenter_cursor(self, cursor: Any) -> Any:
        return None

    @property
    def description(self) -> Any:
        return self._outcome_description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> Any:
        return self._lastrowid

    def _keep(self, outcome: _Outcome) -> None:
        self._outcome_description, self._rowcount, self._lastrowid, rows = outcome
        self._rows = collections.deque(rows or ())

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        connection: OneHopConnection = self._adapt_connection  # type: ignore[assignment]
        async with connection._execute_mutex:
            self._keep(await connection.hop(_run, operation, parameters))

    async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
        connection: OneHopConnection = self._adapt_connection  # type: ignore[assignment]
        async with connection._execute_mutex:
            self._keep(await connection.hop(_run_many, operation, seq_of_parameters))

    async def _async_soft_close(self) -> None:
        return None

    def close(self) -> None:
        self._rows.clear()


class OneHopConnection(AsyncAdapt_aiosqlite_connection):
    """The adapted connection: statements through :class:`OneHopCursor`, and no hop for a commit
    or a rollback when SQLite has no transaction open."""

    __slots__ = ("_done", "_sent")
    _cursor_cls = OneHopCursor

    def __init__(self, dbapi: Any, connection: Any) -> None:  # an aiosqlite.Connection
        super().__init__(dbapi, connection)
        # Calls handed to the thread and calls it finished: each counter is written by one thread
        # only. While they differ (a request cancelled while its statement runs), the thread may
        # yet open a transaction, so a commit or rollback goes through whatever SQLite says now.
        self._sent = 0
        self._done = 0

    async def hop(self, function: Callable[..., T], *args: Any) -> T:
        """``function(sqlite3_connection, *args)`` on the connection's thread."""
        driver = self._connection

        def call() -> T:
            try:
                return function(driver._conn, *args)
            finally:
                self._done += 1

        self._sent += 1
        result: T = await driver._execute(call)
        return result

    def _idle(self) -> bool:
        """Nothing to commit or roll back: no call on the thread, no transaction open."""
        return self._sent == self._done and not self._connection._conn.in_transaction

    def commit(self) -> None:
        if self._connection._connection is None or self._idle():
            return
        try:
            await_(self.hop(sqlite3.Connection.commit))
        except Exception as error:
            self._handle_exception(error)

    def rollback(self) -> None:
        if self._connection._connection is None or self._idle():
            return
        try:
            await_(self.hop(sqlite3.Connection.rollback))
        except Exception as error:
            self._handle_exception(error)


class OneHopDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """The DBAPI module SQLAlchemy's aiosqlite dialect is given (``create_engine(module=...)``)."""

    def connect(self, *arg: Any, **kw: Any) -> OneHopConnection:
        connection = aiosqlite.connect(*arg, **kw)
        connection._thread.daemon = True  # as SQLAlchemy's adapter does: never hold up the exit
        return OneHopConnection(self, await_(_opened(connection)))


async def _opened(connection: aiosqlite.Connection) -> aiosqlite.Connection:
    """``connection``, opened on its thread. A caller cancelled meanwhile (a server stopped as it
    started) waits for the opening to end and closes what it opened before the cancellation goes
    on: cut there, aiosqlite would answer the event loop when the opening ends, closed by then."""

    async def open_it() -> aiosqlite.Connection:
        return await connection

    opening = asyncio.ensure_future(open_it())
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        await _ended(opening)
        if not opening.cancelled() and opening.exception() is None:
            await _ended(asyncio.ensure_future(connection.close()))
        raise


async def _ended(task: asyncio.Future[Any]) -> None:
    """Wait for ``task`` to end, whatever cancels the caller meanwhile."""
    while not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((task,))


def one_hop_dbapi() -> OneHopDBAPI:
    """The module to pass as ``module=`` to ``create_async_engine`` for a ``sqlite+aiosqlite`` URL."""
    return OneHopDBAPI(aiosqlite, sqlite3)
