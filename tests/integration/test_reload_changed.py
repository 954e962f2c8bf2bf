"""``store.agents.reload_changed``: what a step writes against is the agents as stored now, read again
only for the agents that changed since the step read them (on SQLite and PostgreSQL)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch.decisions import StepEntry
from nightshift.batch.steps import queue_batch_run, write_step
from nightshift.domain.agents import LLMConfig
from nightshift.domain.batches import BatchRunRequest
from nightshift.domain.messages import UserInput
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.runtime.step import first_state
from nightshift.services.agents import AgentChanges, AgentSpec, NewBlock, create_agents, delete_agent, update_agent
from nightshift.services.blocks import BlockChanges, update_block
from nightshift.store import agents as agent_store
from nightshift.store import messages as message_store
from nightshift.store.orgs import ensure_default_org

CONFIG = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022")


async def test_only_the_agents_changed_since_the_read_are_read_again(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        specs = [
            AgentSpec(name=name, llm_config=CONFIG, memory_blocks=[NewBlock(label="human", value="nothing yet")])
            for name in ("renamed", "block-edited", "deleted", "window-moved", "untouched")
        ]
        created = await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))
        loaded = await agent_store.load_agents(conn, DEFAULT_ORG_ID, [a.id for a in created])
    renamed, edited, deleted, moved, untouched = (loaded[a.id] for a in created)

    async with engine.begin() as conn:
        await update_agent(
            conn, DEFAULT_ORG_ID, renamed.id, AgentChanges(name="renamed-meanwhile"), now=datetime.now(UTC)
        )
        await update_block(conn, edited.blocks[0], BlockChanges(value="likes tea"), now=datetime.now(UTC))
        await delete_agent(conn, DEFAULT_ORG_ID, deleted.id, now=datetime.now(UTC))
        window = (*moved.message_ids, moved.message_ids[0])
        await agent_store.set_windows(conn, [replace(moved, message_ids=window)], datetime.now(UTC))

    async with engine.connect() as conn:
        current = await agent_store.reload_changed(conn, DEFAULT_ORG_ID, loaded)

    assert set(current) == {renamed.id, edited.id, moved.id, untouched.id}
    assert current[untouched.id] is untouched  # not read again
    assert current[renamed.id].name == "renamed-meanwhile"
    assert current[edited.id].blocks[0].value == "likes tea"
    assert current[moved.id].message_ids == window
    async with engine.connect() as conn:
        assert await agent_store.reload_changed(conn, DEFAULT_ORG_ID, current) == current
        assert await agent_store.reload_changed(conn, DEFAULT_ORG_ID, {}) == {}


async def test_a_written_step_holds_its_agents_as_stored(engine: AsyncEngine) -> None:
    """What ``write_step`` hands to the submission is what the database holds, so the submission
    reads again only the agents changed since (here, one whose block was edited meanwhile)."""
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        specs = [
            AgentSpec(name=name, llm_config=CONFIG, memory_blocks=[NewBlock(label="human", value="nothing yet")])
            for name in ("kept", "edited")
        ]
        created = await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))
        run = await queue_batch_run(
            conn,
            DEFAULT_ORG_ID,
            [BatchRunRequest(agent_id=a.id, messages=(UserInput(text="hello"),)) for a in created],
            now=datetime.now(UTC),
            callback_url=None,
            default_max_steps=5,
        )
        loaded = await agent_store.load_agents(conn, DEFAULT_ORG_ID, [a.id for a in created])
        entries = [StepEntry(agent=a, state=first_state(a, 5), heartbeat=True) for a in loaded.values()]
        (written,) = await write_step(conn, run, entries, datetime.now(UTC), endpoints={})
    kept, edited = (written.agents[a.id] for a in created)
    assert [i.agent_id for i in written.items] == [a.id for a in created]
    assert len(kept.message_ids) == len(loaded[kept.id].message_ids) + 1  # the heartbeat

    # The messages it had in hand (each agent's system message and heartbeat) are as stored.
    async with engine.connect() as conn:
        assert written.messages == await message_store.get_messages(conn, written.messages)
    assert set(written.messages) == {i for a in (kept, edited) for i in (a.message_ids[0], a.message_ids[-1])}

    async with engine.begin() as conn:
        await update_block(conn, edited.blocks[0], BlockChanges(value="likes tea"), now=datetime.now(UTC))
    async with engine.connect() as conn:
        current = await agent_store.reload_changed(conn, DEFAULT_ORG_ID, written.agents)
        stored = await agent_store.load_agents(conn, DEFAULT_ORG_ID, [a.id for a in created])
    assert current[kept.id] is kept  # as written: not read again
    assert current == stored
    assert current[edited.id].blocks[0].value == "likes tea"
