"""Alembic's ``upgrade head`` on an empty database gives exactly the schema the models declare."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, text

from nightshift.store.db import include_object, opened, upgrade
from nightshift.store.tables import metadata


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"include_object": include_object, "compare_type": True, "target_metadata": metadata}
    )
    return list(compare_metadata(context, metadata))


async def test_upgrade_head_matches_the_models(empty_db_url: str) -> None:
    async with opened(empty_db_url) as engine:
        await upgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_differences) == []
            tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
            assert set(metadata.tables) <= tables
            assert await conn.scalar(text("SELECT version_num FROM alembic_version")) == "0004"
        # Upgrading again is a no-op, as `nightshift serve` does on every start.
        await upgrade(engine)


async def test_full_text_search_objects_exist(empty_db_url: str) -> None:
    async with opened(empty_db_url) as engine:
        await upgrade(engine)
        async with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                names = set((await conn.execute(text("SELECT name FROM sqlite_master"))).scalars())
                assert {"messages_fts", "passages_fts", "messages_fts_ai", "passages_fts_au"} <= names
            else:
                names = set((await conn.execute(text("SELECT indexname FROM pg_indexes"))).scalars())
                assert {"ix_messages_fts", "ix_passages_fts"} <= names
