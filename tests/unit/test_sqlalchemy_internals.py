"""The internals of SQLAlchemy and aiosqlite that the store relies on for speed, as it relies on them.

``store/sqlite_driver.py`` (one hop to SQLite's thread per statement) subclasses SQLAlchemy's
aiosqlite adapter and overrides or reads its private members; ``store/copy.py`` (COPY on
PostgreSQL) fires the ``before_cursor_execute`` event itself. Each is fenced in its module; these
tests fail, naming the member, when an upgrade renames one or changes its arguments, before the
behaviour tests (``tests/integration/test_db_connections.py``, ``test_insert_rows.py``) fail in
ways harder to read.
"""

from __future__ import annotations

import inspect
from typing import Any

import aiosqlite
import pytest
from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_connection, AsyncAdapt_aiosqlite_cursor
from sqlalchemy.engine.events import ConnectionEvents

from nightshift.store.sqlite_driver import OneHopConnection, OneHopCursor


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def _slots(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ())}


# Methods OneHopCursor / OneHopConnection override, with the arguments SQLAlchemy calls them with.
OVERRIDDEN = [
    (AsyncAdapt_aiosqlite_cursor, "__init__", ["self", "adapt_connection"]),
    (AsyncAdapt_aiosqlite_cursor, "_execute_async", ["self", "operation", "parameters"]),
    (AsyncAdapt_aiosqlite_cursor, "_executemany_async", ["self", "operation", "seq_of_parameters"]),
    (AsyncAdapt_aiosqlite_cursor, "_async_soft_close", ["self"]),
    (AsyncAdapt_aiosqlite_cursor, "_make_new_cursor", ["self", "connection"]),
    (AsyncAdapt_aiosqlite_cursor, "_aenter_cursor", ["self", "cursor"]),
    (AsyncAdapt_aiosqlite_cursor, "close", ["self"]),
    (AsyncAdapt_aiosqlite_connection, "__init__", ["self", "dbapi", "connection"]),
    (AsyncAdapt_aiosqlite_connection, "commit", ["self"]),
    (AsyncAdapt_aiosqlite_connection, "rollback", ["self"]),
    (AsyncAdapt_aiosqlite_connection, "_handle_exception", ["self", "error"]),
]


@pytest.mark.parametrize(("cls", "name", "arguments"), OVERRIDDEN, ids=lambda v: getattr(v, "__name__", v))
def test_the_sqlite_adapter_methods_the_driver_overrides_keep_their_arguments(
    cls: type, name: str, arguments: list[str]
) -> None:
    assert callable(getattr(cls, name, None)), f"SQLAlchemy's {cls.__name__}.{name} is gone"
    assert _parameters(getattr(cls, name)) == arguments


def test_the_sqlite_adapter_keeps_the_attributes_the_driver_uses() -> None:
    assert {"_adapt_connection", "_rows"} <= _slots(AsyncAdapt_aiosqlite_cursor)
    assert {"_connection", "_execute_mutex"} <= _slots(AsyncAdapt_aiosqlite_connection)
    assert AsyncAdapt_aiosqlite_connection._cursor_cls is AsyncAdapt_aiosqlite_cursor
    assert OneHopConnection._cursor_cls is OneHopCursor


def test_aiosqlite_keeps_its_thread_call_and_connection() -> None:
    assert _parameters(aiosqlite.Connection._execute) == ["self", "fn", "args", "kwargs"]
    assert isinstance(aiosqlite.Connection._conn, property)
    connection = aiosqlite.connect(":memory:")  # not started: no thread runs
    assert hasattr(connection, "_thread")
    assert connection._connection is None


def test_the_cursor_event_copy_fires_keeps_its_arguments() -> None:
    arguments = ["self", "conn", "cursor", "statement", "parameters", "context", "executemany"]
    assert _parameters(ConnectionEvents.before_cursor_execute) == arguments
