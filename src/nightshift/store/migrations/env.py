"""Alembic environment: runs on the connection handed over by ``store.db.upgrade``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from nightshift.store.db import include_object
from nightshift.store.tables import metadata


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "the alembic command is not set up for nightshift: migrate with `nightshift db upgrade`, "
        'and write the next revision with `nightshift db revision -m "..."` (make migration)'
    )
run(connection)
