"""``store.agent_cache.AgentCache``: the agents a poller submitted, kept as stored, are checked at
their next load and read again only when something of theirs changed (on SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.services.agents import AgentChanges, AgentSpec, NewBlock, create_agents, delete_agent, update_agent
from nightshift.services.blocks import BlockChanges, update_block
from nightshift.services.groups import pair
from nightshift.services.tools import ToolChanges, create_tool, delete_tool, update_tool
from nightshift.store import agents as agent_store
from nightshift.store import messages as message_store
from nightshift.store.agent_cache import AgentCache, held_bytes
from nightshift.store.orgs import ensure_default_org
from support.memory import allocated
from support.statements import statements

CONFIG = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022")


def _source(name: str, answer: str) -> str:
    return f'''
def {name}(item: str) -> str:
    """Look an item up.

    Args:
        item: The item's name.
    """
    return "{answer}"
'''


async def _agents(engine: AsyncEngine, names: Sequence[str], *, blocks: int = 1, **spec: object) -> list[Agent]:
    memory = [NewBlock(label=f"block-{i}", value=f"nothing yet about {i}") for i in range(blocks)]
    specs = [AgentSpec(name=name, llm_config=CONFIG, memory_blocks=memory, **spec) for name in names]  # type: ignore[arg-type]
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        created = await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))
        loaded = await agent_store.load_agents(conn, DEFAULT_ORG_ID, [a.id for a in created])
    return [loaded[a.id] for a in created]


async def test_kept_agents_are_checked_and_read_again_only_when_something_of_theirs_changed(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        edited_tool = await create_tool(conn, DEFAULT_ORG_ID, now=datetime.now(UTC), source_code=_source("a", "one"))
        deleted_tool = await create_tool(conn, DEFAULT_ORG_ID, now=datetime.now(UTC), source_code=_source("b", "one"))
    plain = await _agents(engine, ["untouched", "renamed", "block-edited", "deleted"])
    uses_edited, uses_deleted = await _agents(engine, ["tool-edited"], tool_ids=[edited_tool.id]) + await _agents(
        engine, ["tool-deleted"], tool_ids=[deleted_tool.id]
    )
    untouched, renamed, block_edited, deleted = plain
    everyone = [*plain, uses_edited, uses_deleted]
    ids = [a.id for a in everyone]
    cache = AgentCache(10**8)
    cache.keep(everyone)
    assert len(cache) == len(everyone)

    with statements(engine) as seen:
        async with engine.connect() as conn:
            same = await cache.load(conn, DEFAULT_ORG_ID, ids)
    assert all(same[a.id] is a for a in everyone)  # none read again
    assert len(seen) == 2  # the agents' and blocks' times, then the tools'

    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await update_agent(conn, DEFAULT_ORG_ID, renamed.id, AgentChanges(name="renamed-meanwhile"), now=now)
        await update_block(conn, block_edited.blocks[0], BlockChanges(value="likes tea"), now=now)
        await delete_agent(conn, DEFAULT_ORG_ID, deleted.id, now=now)
        await update_tool(conn, DEFAULT_ORG_ID, edited_tool.id, ToolChanges(source_code=_source("a", "two")), now=now)
        await delete_tool(conn, DEFAULT_ORG_ID, deleted_tool.id)
    with statements(engine) as seen:
        async with engine.connect() as conn:
            current = await cache.load(conn, DEFAULT_ORG_ID, ids)
            stored = await agent_store.load_agents(conn, DEFAULT_ORG_ID, ids)

    assert current == stored and deleted.id not in current
    assert current[untouched.id] is untouched
    assert current[renamed.id].name == "renamed-meanwhile"
    assert current[block_edited.id].blocks[0].value == "likes tea"
    edited = current[uses_edited.id].tool("a")
    assert edited is not None and '"two"' in (edited.source_code or "")
    assert current[uses_deleted.id].tool("b") is None
    assert len(seen) == 2 + 3 + 3  # the two checks, the changed agents read again, then the comparison's read
    # What changed is no longer held (a submit keeps it again as it stores it).
    assert [a.id in cache for a in everyone] == [True, False, False, False, False, False]


async def test_agents_not_held_or_of_another_organization_are_read(engine: AsyncEngine) -> None:
    held, other = await _agents(engine, ["held", "not-held"])
    cache = AgentCache(10**8)
    cache.keep([held])
    with statements(engine) as seen:
        async with engine.connect() as conn:
            found = await cache.load(conn, DEFAULT_ORG_ID, [held.id, other.id, "agent-nope"])
            elsewhere = await cache.load(conn, "org-elsewhere", [held.id])
    assert found[held.id] is held and found[other.id] == other and set(found) == {held.id, other.id}
    assert elsewhere == {}  # what one organization's load finds is never another's
    assert len(seen) == 2 + 3 + 1  # checked, the rest read; then, elsewhere, a read that finds nothing


async def test_an_agent_that_manages_a_group_is_not_kept(engine: AsyncEngine) -> None:
    (main,) = await _agents(engine, ["main"], enable_sleeptime=True)
    async with engine.begin() as conn:
        await pair(conn, DEFAULT_ORG_ID, [main], now=datetime.now(UTC))
        paired = (await agent_store.load_agents(conn, DEFAULT_ORG_ID, [main.id]))[main.id]
    assert paired.group is not None
    cache = AgentCache(10**8)
    cache.keep([paired])
    assert main.id not in cache and cache.held.held_bytes == 0


@pytest.mark.parametrize("blocks", [1, 4])
async def test_the_cache_counts_at_least_what_its_agents_take(engine: AsyncEngine, blocks: int) -> None:
    """The bound is on an estimate (``held_bytes``): the memory new agents loaded together really
    take, as allocated, is within a tenth over it, and not far under."""
    (first,) = await _agents(engine, ["first"])
    agents = await _agents(engine, [f"agent-{i}" for i in range(100)], blocks=blocks)
    ids = [a.id for a in agents]
    async with engine.connect() as conn:
        await agent_store.load_agents(conn, DEFAULT_ORG_ID, [first.id])  # the statements compiled before counting
        with allocated() as taken:
            loaded = await agent_store.load_agents(conn, DEFAULT_ORG_ID, ids)
            cache = AgentCache(10**9)
            cache.keep(loaded.values())
    assert len(cache) == len(ids) and sum(map(held_bytes, loaded.values())) == cache.held.held_bytes
    estimate = cache.held.held_bytes
    assert 0.7 * estimate <= taken.bytes <= 1.1 * estimate, (taken.bytes / len(ids), estimate / len(ids))


async def test_a_system_message_is_given_only_for_the_prompt_and_blocks_it_was_kept_with(engine: AsyncEngine) -> None:
    """``first_messages``: a step neither reads nor checks the system messages kept with its agents,
    as long as their prompts and blocks are the very ones they were kept with."""
    kept, plain = await _agents(engine, ["kept", "plain"])
    async with engine.connect() as conn:
        firsts = await message_store.get_messages(conn, [kept.message_ids[0], plain.message_ids[0]])
        stored = (await agent_store.load_agents(conn, DEFAULT_ORG_ID, [kept.id]))[kept.id]
    cache = AgentCache(10**8)
    cache.keep([kept, plain], {kept.message_ids[0]: firsts[kept.message_ids[0]]})
    system = firsts[kept.message_ids[0]]

    assert cache.first_messages([kept, plain]) == {system.id: system}  # plain's was not in hand
    stepped = replace(kept, message_ids=(*kept.message_ids, "message-new"), context_tokens=1)
    assert cache.first_messages([stepped]) == {system.id: system}  # the same prompt and blocks
    assert stored == kept and cache.first_messages([stored]) == {}  # read again: not known to be the same
    edited = replace(kept, blocks=tuple(replace(b, value="likes tea") for b in kept.blocks))
    assert cache.first_messages([edited]) == {}
    prompted = replace(kept, system=kept.system + " Be brief.")
    assert cache.first_messages([prompted]) == {}
    reset = replace(kept, message_ids=("message-other", *kept.message_ids[1:]))
    assert cache.first_messages([reset]) == {}
