"""Alembic's ``upgrade head`` on an empty database gives exactly the schema the models declare."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, insert, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batch_progress import BatchSummary
from nightshift.domain.batches import ItemOutcome, StepStatus
from nightshift.domain.costs import Costs
from nightshift.domain.usage import Usage
from nightshift.store import db
from nightshift.store.batch_run_views import run_progress
from nightshift.store.batch_summaries import summarize
from nightshift.store.db import include_object, opened, upgrade
from nightshift.store.tables import agents, batch_items, batch_runs, metadata, organizations, provider_batches

# The newest revision: the number of the last of store/migrations/versions (they are numbered in order).
HEAD = max(p.name[:4] for p in (Path(db.__file__).parent / "migrations" / "versions").glob("0*.py"))


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"include_object": include_object, "compare_type": True, "target_metadata": metadata}
    )
    return list(compare_metadata(context, metadata))


async def _one_agent_run(conn: AsyncConnection, now: datetime, *, run_status: str, batch_status: str) -> None:
    """org-1 with agent-1, and run-1 with one provider batch, pb-1 (step 0), as rows of the earliest schema."""
    times = {"created_at": now, "updated_at": now}
    await conn.execute(insert(organizations).values(id="org-1", name="org", created_at=now))
    await conn.execute(
        insert(agents).values(
            id="agent-1", organization_id="org-1", name="a", system="", llm_config={}, tool_rules=[],
            metadata={}, message_ids=[], message_buffer_autoclear=False, **times,
        )
    )  # fmt: skip
    await conn.execute(
        insert(batch_runs).values(
            id="run-1", organization_id="org-1", status=run_status, metadata={}, max_steps=2,
            callback_attempts=0, **times,
        )
    )  # fmt: skip
    await conn.execute(
        insert(provider_batches).values(
            id="pb-1", organization_id="org-1", batch_run_id="run-1", provider="anthropic", step_number=0,
            status=batch_status, request_counts={}, **times,
        )
    )  # fmt: skip


async def test_upgrade_head_matches_the_models(empty_db_url: str) -> None:
    async with opened(empty_db_url) as engine:
        await upgrade(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(_differences) == []
            tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
            assert set(metadata.tables) <= tables
            assert await conn.scalar(text("SELECT version_num FROM alembic_version")) == HEAD
        # Upgrading again is a no-op, as `nightshift serve` does on every start.
        await upgrade(engine)


async def test_full_text_search_objects_exist(empty_db_url: str) -> None:
    async with opened(empty_db_url) as engine:
        await upgrade(engine)
        async with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                names = set((await conn.execute(text("SELECT name FROM sqlite_master"))).scalars())
                fts = {"messages_fts", "passages_fts", "messages_fts_ad", "messages_fts_au", "passages_fts_ai"}
                assert fts <= names
                # New messages are indexed by the statement that inserts them (store.messages), not per row.
                assert "messages_fts_ai" not in names
            else:
                names = set((await conn.execute(text("SELECT indexname FROM pg_indexes"))).scalars())
                assert {"ix_messages_fts", "ix_passages_fts"} <= names


async def test_items_priced_before_0005_keep_their_normal_api_cost(empty_db_url: str) -> None:
    # Items applied before 0005 were priced at exactly half the normal price in a batch: their
    # cost without batch is twice their cost; what their cache saved was never recorded.
    now = datetime.now(UTC)
    times = {"created_at": now, "updated_at": now}
    async with opened(empty_db_url) as engine:
        await upgrade(engine, "0004")
        async with engine.begin() as conn:
            await _one_agent_run(conn, now, run_status="completed", batch_status="applied")
            item = {"organization_id": "org-1", "batch_run_id": "run-1", "provider_batch_id": "pb-1",
                    "agent_id": "agent-1", "request_status": "completed", "step_status": "completed",
                    "step_state": {"schema_version": 1}, **times}  # fmt: skip
            await conn.execute(insert(batch_items).values(id="item-1", cost_usd=0.0125, **item))
            await conn.execute(insert(batch_items).values(id="item-2", cost_usd=None, **item))
        await upgrade(engine)
        async with engine.connect() as conn:
            rows = await conn.execute(
                select(
                    batch_items.c.id, batch_items.c.cost_without_batch_usd, batch_items.c.cache_savings_usd
                ).order_by(batch_items.c.id)
            )
            assert [tuple(row) for row in rows] == [("item-1", 0.025, None), ("item-2", None, None)]


async def test_batches_closed_before_0010_get_their_summaries(empty_db_url: str) -> None:
    now = datetime.now(UTC)
    times = {"created_at": now, "updated_at": now}
    async with opened(empty_db_url) as engine:
        await upgrade(engine, "0009")
        async with engine.begin() as conn:
            await conn.execute(insert(organizations).values(id="org-1", name="org", created_at=now))
            for agent_id in ("agent-1", "agent-2"):
                await conn.execute(
                    insert(agents).values(
                        id=agent_id, organization_id="org-1", name=agent_id, system="", llm_config={},
                        tool_rules=[], metadata={}, message_ids=[], message_buffer_autoclear=False, **times,
                    )
                )  # fmt: skip
            await conn.execute(
                insert(batch_runs).values(
                    id="run-1", organization_id="org-1", status="running", metadata={}, max_steps=3,
                    callback_attempts=0, **times,
                )
            )  # fmt: skip
            for batch_id, step, status in (("pb-1", 0, "applied"), ("pb-2", 1, "cancelled"), ("pb-3", 2, "running")):
                await conn.execute(
                    insert(provider_batches).values(
                        id=batch_id, organization_id="org-1", batch_run_id="run-1", provider="anthropic",
                        step_number=step, status=status, request_counts={}, **times,
                    )
                )  # fmt: skip
            usage = {"input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 0, "cache_write_tokens": 5}
            item = {"organization_id": "org-1", "batch_run_id": "run-1", "step_state": {"schema_version": 2}, **times}
            await conn.execute(
                insert(batch_items),
                [
                    {**item, "id": "item-1", "provider_batch_id": "pb-1", "agent_id": "agent-1",
                     "request_status": "completed", "step_status": "completed", "outcome": "continued",
                     "usage": usage, "cost_usd": 0.25, "cost_without_batch_usd": 0.5, "cache_savings_usd": 0.0},
                    {**item, "id": "item-2", "provider_batch_id": "pb-1", "agent_id": "agent-2",
                     "request_status": "failed", "step_status": "completed", "outcome": "failed",
                     "usage": None, "cost_usd": None, "cost_without_batch_usd": None, "cache_savings_usd": None},
                    {**item, "id": "item-3", "provider_batch_id": "pb-2", "agent_id": "agent-1",
                     "request_status": "cancelled", "step_status": "completed", "outcome": "cancelled",
                     "usage": None, "cost_usd": None, "cost_without_batch_usd": None, "cache_savings_usd": None},
                    {**item, "id": "item-4", "provider_batch_id": "pb-3", "agent_id": "agent-1",
                     "request_status": "running", "step_status": "paused", "outcome": None,
                     "usage": None, "cost_usd": None, "cost_without_batch_usd": None, "cache_savings_usd": None},
                ],
            )  # fmt: skip
        await upgrade(engine)
        async with engine.connect() as conn:
            stored = {
                row.id: row.summary
                for row in await conn.execute(select(provider_batches.c.id, provider_batches.c.summary))
            }
            assert stored["pb-3"] is None  # still open: counted from its items at each look
            afresh = await summarize(conn, ["pb-1", "pb-2"])
            assert {b: BatchSummary.from_json(stored[b]) for b in ("pb-1", "pb-2")} == afresh
            progress = await run_progress(conn, "run-1")
    assert afresh["pb-1"].items == {
        (StepStatus.COMPLETED, ItemOutcome.CONTINUED): 1,
        (StepStatus.COMPLETED, ItemOutcome.FAILED): 1,
    }
    assert progress.running == 1 and progress.step == 2
    assert progress.outcomes == {ItemOutcome.CONTINUED: 1, ItemOutcome.FAILED: 1, ItemOutcome.CANCELLED: 1}
    assert progress.usage == Usage.from_json(usage) and progress.batch_usage["pb-1"] == Usage.from_json(usage)
    assert progress.cost == Costs(usd=0.25, without_batch_usd=0.5, cache_savings_usd=0.0)


async def test_absent_usage_stored_before_0012_becomes_sql_null(empty_db_url: str) -> None:
    # Before 0012 an item without usage held JSON null, which `usage IS NOT NULL` matched: the
    # view of a run parsed the usage of every item waiting for its result.
    now = datetime.now(UTC)
    times = {"created_at": now, "updated_at": now}
    async with opened(empty_db_url) as engine:
        await upgrade(engine, "0011")
        async with engine.begin() as conn:
            await _one_agent_run(conn, now, run_status="running", batch_status="running")
            item = {"organization_id": "org-1", "batch_run_id": "run-1", "provider_batch_id": "pb-1",
                    "agent_id": "agent-1", "step_state": {"schema_version": 2}, **times}  # fmt: skip
            usage = {"input_tokens": 10, "output_tokens": 2}
            await conn.execute(
                insert(batch_items),
                [
                    {**item, "id": "item-1", "request_status": "running", "step_status": "paused", "usage": None},
                    {**item, "id": "item-2", "request_status": "succeeded", "step_status": "paused", "usage": usage},
                ],
            )
            with_usage = text("SELECT count(*) FROM batch_items WHERE usage IS NOT NULL")
            assert await conn.scalar(with_usage) == 1  # the column's type now writes None as SQL NULL
            await conn.execute(text("UPDATE batch_items SET usage = 'null' WHERE id = 'item-1'"))  # as it was
            assert await conn.scalar(with_usage) == 2
        await upgrade(engine)
        async with engine.connect() as conn:
            used = (await conn.execute(text("SELECT id FROM batch_items WHERE usage IS NOT NULL"))).scalars().all()
            progress = await run_progress(conn, "run-1")
    assert used == ["item-2"]
    assert progress.running == 2 and progress.usage == Usage.from_json(usage)
