"""Revision 0013 on a database with data: items outlive their agents, older blocks get ``standalone``.

A block written before 0013 is taken as made with an agent when one of its agents was created at
the same instant (an agent and its ``memory_blocks`` share their creation time), else standalone.
Nothing else changes: on SQLite, copying a table to change it would have cascaded its deletion
(messages' links to their items, agents' links to their blocks).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import insert, select

from nightshift.store import agents as agent_store
from nightshift.store.db import opened, upgrade
from nightshift.store.tables import (
    agent_blocks,
    agents,
    batch_items,
    batch_runs,
    blocks,
    deleted_agents,
    messages,
    organizations,
    provider_batches,
)


async def test_0013_marks_older_blocks_and_keeps_the_items_of_a_deleted_agent(empty_db_url: str) -> None:
    now = datetime.now(UTC)
    earlier = now - timedelta(minutes=5)
    async with opened(empty_db_url) as engine:
        await upgrade(engine, "0012")
        async with engine.begin() as conn:
            await conn.execute(insert(organizations).values(id="org-1", name="org", created_at=now))
            for agent_id, created in (("agent-1", now), ("agent-2", now + timedelta(seconds=1))):
                await conn.execute(
                    insert(agents).values(
                        id=agent_id, organization_id="org-1", name=f"name of {agent_id}", system="",
                        llm_config={}, tool_rules=[], metadata={}, message_ids=[],
                        message_buffer_autoclear=False, created_at=created, updated_at=created,
                    )
                )  # fmt: skip
            # Made with agent-1 (its own, and one agent-2 shares), made on its own earlier and
            # attached to agent-1, and one attached to no agent.
            for block_id, created in (("own", now), ("shared", now), ("attached", earlier), ("loose", earlier)):
                await conn.execute(
                    insert(blocks).values(
                        id=block_id, organization_id="org-1", label=block_id, value="", limit=100,
                        description=None, read_only=False, metadata={}, created_at=created, updated_at=created,
                    )
                )  # fmt: skip
            links = [("agent-1", "own"), ("agent-1", "shared"), ("agent-1", "attached"), ("agent-2", "shared")]
            await conn.execute(
                insert(agent_blocks),
                [{"agent_id": a, "block_id": b, "label": b, "position": i} for i, (a, b) in enumerate(links)],
            )
            times = {"created_at": now, "updated_at": now}
            await conn.execute(
                insert(batch_runs).values(
                    id="run-1", organization_id="org-1", status="completed", metadata={}, max_steps=2,
                    callback_attempts=0, **times,
                )
            )  # fmt: skip
            await conn.execute(
                insert(provider_batches).values(
                    id="pb-1", organization_id="org-1", batch_run_id="run-1", provider="anthropic", step_number=0,
                    status="applied", request_counts={}, **times,
                )
            )  # fmt: skip
            await conn.execute(
                insert(batch_items).values(
                    id="item-1", organization_id="org-1", batch_run_id="run-1", provider_batch_id="pb-1",
                    agent_id="agent-1", request_status="completed", step_status="completed", outcome="finished",
                    step_state={"schema_version": 2}, cost_usd=0.5, **times,
                )
            )  # fmt: skip
            await conn.execute(
                insert(messages).values(
                    id="message-1", organization_id="org-1", agent_id="agent-1", role="assistant", text="hi",
                    search_text="hi", tool_calls=[], is_error=False, batch_item_id="item-1", extra={},
                    created_at=now,
                )
            )  # fmt: skip

        await upgrade(engine)
        async with engine.begin() as conn:
            # Nothing else changed: the item's message still points at it, the blocks' links are there.
            assert await conn.scalar(select(messages.c.batch_item_id)) == "item-1"
            assert len((await conn.execute(select(agent_blocks))).all()) == len(links)
            standalone = {
                row.id: row.standalone for row in await conn.execute(select(blocks.c.id, blocks.c.standalone))
            }
            assert standalone == {"own": False, "shared": False, "attached": True, "loose": True}

            assert await agent_store.delete_agent(conn, "org-1", "agent-1", now)
            # Its item stays, as it was; its name is kept; its own block goes, the others stay.
            item = (await conn.execute(select(batch_items.c.agent_id, batch_items.c.cost_usd))).one()
            assert tuple(item) == ("agent-1", 0.5)
            kept = (await conn.execute(select(deleted_agents.c.id, deleted_agents.c.name))).one()
            assert tuple(kept) == ("agent-1", "name of agent-1")
            assert set(await conn.scalars(select(blocks.c.id))) == {"shared", "attached", "loose"}
