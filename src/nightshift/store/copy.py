"""Many rows written at once: inserted by ``COPY`` on PostgreSQL and an ``executemany`` INSERT on
SQLite (``insert_rows``), and any statement executed for many rows (``execute_rows``).

A step writes its agents' messages and the next step's items ten thousand rows at a time. On
asyncpg an ``executemany`` INSERT is one execution per row, each inserted (and logged to the WAL)
alone; rows sent by ``COPY`` are inserted a page at a time. For the rows of ``messages`` (five
indexes, a full-text one among them, three foreign keys) that spares the database CPU on every
row (``make bench`` on PostgreSQL prints the database's CPU per agent).

On SQLite the statement is sent as the driver's own SQL with the rows as tuples: SQLAlchemy's
``executemany`` builds each row's parameters one value at a time (a good part of the CPU of
writing a step, by a profile), where here each parameter is processed for every row in one pass.

Either way the rows go through the columns' own bind processing (JSON serialized, text cleaned,
timestamps as the column keeps them) as they would in an INSERT, the write is one statement to
the engine's ``before_cursor_execute`` listeners (what counts statements), and a failure is raised
as SQLAlchemy's exceptions are (``IntegrityError`` for a violated constraint), so callers cannot
tell the paths apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
from sqlalchemy import Table, insert
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase

# Fewer rows than this go by INSERT: a copy costs a round trip more the first time a connection
# copies into a table (asyncpg reads the columns' types), and a few rows gain nothing from it.
COPY_MIN_ROWS = 100


async def insert_rows(conn: AsyncConnection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (each with the same columns) into ``table`` in one statement."""
    if not rows:
        return
    if conn.dialect.name == "sqlite":
        await execute_rows(conn, insert(table), rows)
        return
    if len(rows) >= COPY_MIN_ROWS:
        driver = (await conn.get_raw_connection()).driver_connection
        # SQLAlchemy's adapter sends BEGIN with a transaction's first statement: a copy made before
        # it would not be part of the transaction, so that one goes by INSERT (and begins it).
        if isinstance(driver, asyncpg.Connection) and driver.is_in_transaction():
            await _copy(conn, driver, table, rows)
            return
    await conn.execute(insert(table), list(rows))


async def execute_rows(conn: AsyncConnection, statement: UpdateBase, rows: Sequence[Mapping[str, Any]]) -> None:
    """``conn.execute(statement, rows)``: ``statement`` run once per row, with its parameters by name
    from the row (or, for a value written into the statement, from it), in one statement."""
    if not rows:
        return
    if conn.dialect.name == "sqlite":
        compiled = statement.compile(dialect=conn.dialect, column_keys=list(rows[0]))
        assert isinstance(compiled, SQLCompiler)
        binds = [compiled.binds[name] for name in compiled.positiontup or ()]
        if binds and not (compiled.literal_execute_params or compiled.post_compile_params):  # (no expanding IN)
            columns = []
            for bind in binds:
                values = [row[bind.key] for row in rows] if bind.key in rows[0] else [bind.effective_value] * len(rows)
                process = bind.type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
                columns.append(values if process is None else list(map(process, values)))
            await conn.exec_driver_sql(compiled.string, list(zip(*columns, strict=True)))
            return
    await conn.execute(statement, list(rows))


def _processed_columns(
    conn: AsyncConnection, table: Table, rows: Sequence[Mapping[str, Any]]
) -> tuple[list[str], list[list[Any]]]:
    """The names of the rows' columns (the first row's keys) and each column's values, bound as
    the column binds them, for a copy: column by column, as most columns have no processing."""
    names = list(rows[0])
    columns = [[row[name] for row in rows] for name in names]
    for index, name in enumerate(names):
        process = table.c[name].type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
        if process is not None:
            columns[index] = list(map(process, columns[index]))
    return names, columns


async def _copy(
    conn: AsyncConnection, driver: asyncpg.Connection, table: Table, rows: Sequence[Mapping[str, Any]]
) -> None:
    names, columns = _processed_columns(conn, table, rows)
    records = list(zip(*columns, strict=True))
    statement = f"COPY {table.name} ({', '.join(names)}) FROM STDIN (FORMAT binary)"
    sync = conn.sync_connection
    assert sync is not None
    sync.dispatch.before_cursor_execute(sync, None, statement, records, None, True)
    try:
        await driver.copy_records_to_table(table.name, records=records, columns=names)
    except asyncpg.IntegrityConstraintViolationError as exc:
        raise IntegrityError(statement, None, exc) from exc
    except asyncpg.PostgresError as exc:
        raise DBAPIError(statement, None, exc) from exc
