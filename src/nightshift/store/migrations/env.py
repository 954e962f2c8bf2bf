"""Alembic environment: runs on the connection handed over by ``store.db.upgrade``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from nightshift.store.tables import metadata

# Objects the migrations create by hand per dialect (full-text search) and the models don't declare.
HAND_MADE = {"messages_fts", "passages_fts", "ix_messages_fts", "ix_passages_fts"}


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    if name is None:
        return True
    return not (name in HAND_MADE or name.startswith(("messages_fts_", "passages_fts_")))


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
    raise RuntimeError("run migrations with `nightshift db upgrade`, not the alembic command")
run(connection)
