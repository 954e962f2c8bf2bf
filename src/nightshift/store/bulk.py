"""``column IN (values)`` with ONE bound parameter, so a statement costs the same for 10 or 100,000 ids.

PostgreSQL binds a text array (``= ANY(:ids)``); SQLite binds one JSON text and reads it with
``json_each``. Both avoid the drivers' limits on the number of parameters (about 32,000).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, Select, String, Table, any_, bindparam, column, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection


def in_ids(conn: AsyncConnection, target: Any, values: Iterable[str]) -> ColumnElement[bool]:
    """A condition ``target IN values`` for the connection's dialect, with a single parameter."""
    dialect = conn.dialect.name
    return _in(dialect, target, bindparam(None, bound_ids(conn, values), type_=_ids_type(dialect)))


def in_bound(dialect: str, target: Any, name: str) -> ColumnElement[bool]:
    """``target IN`` the values bound at execution as ``name`` (``bound_ids``), for a statement
    built once per dialect and executed many times: SQLAlchemy then reuses its cache key too,
    which building the statement anew recomputes each time (a good part of a small read)."""
    return _in(dialect, target, bindparam(name, type_=_ids_type(dialect)))


def _in(dialect: str, target: Any, ids: BindParameter[Any]) -> ColumnElement[bool]:
    if dialect == "postgresql":
        return target == any_(ids)  # type: ignore[no-any-return]
    each: Select[Any] = select(column("value")).select_from(func.json_each(ids))
    return target.in_(each)  # type: ignore[no-any-return]


def _ids_type(dialect: str) -> Any:
    return ARRAY(String) if dialect == "postgresql" else String()


def bound_ids(conn: AsyncConnection, values: Iterable[str]) -> Any:
    """The value to bind for an ``in_bound`` parameter."""
    items = list(values)
    return items if conn.dialect.name == "postgresql" else json.dumps(items)


async def count_per_agent(conn: AsyncConnection, table: Table, agent_ids: Iterable[str]) -> dict[str, int]:
    """Rows of ``table`` per agent (every id present, 0 when none), in one statement."""
    ids = list(agent_ids)
    query = select(table.c.agent_id, func.count()).where(in_ids(conn, table.c.agent_id, ids)).group_by(table.c.agent_id)
    counts = dict.fromkeys(ids, 0)
    counts.update({row[0]: row[1] for row in await conn.execute(query)})
    return counts


def insert_ignoring_conflicts(conn: AsyncConnection, table: Table) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` for the connection's dialect (for rows made once)."""
    statement = pg_insert(table) if conn.dialect.name == "postgresql" else sqlite_insert(table)
    return statement.on_conflict_do_nothing()
