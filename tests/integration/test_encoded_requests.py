"""A batch's requests are built a slice of windows at a time and encoded for the provider as soon
as each is built (``runtime.context.encoded_requests``): the slices change nothing of what is sent,
and a request the provider refuses to encode fails its agent alone."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import orjson
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.batches import StepState
from nightshift.domain.messages import Message
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.errors import ProviderError, ProviderErrorKind
from nightshift.providers.base import ModelRequest
from nightshift.providers.registry import provider_info
from nightshift.providers.spool import EncodedRequests
from nightshift.runtime.caching import IN_CALL
from nightshift.runtime.context import encoded_requests
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.store import messages as message_store
from nightshift.store.held import IN_USE_SECONDS
from nightshift.store.message_cache import MessageCache, held_bytes
from nightshift.store.orgs import ensure_default_org
from support.clock import ManualClock
from support.memory import allocated

OPENAI = provider_info("openai")


async def _agents(engine: AsyncEngine, count: int) -> list[Agent]:
    config = LLMConfig(provider="openai", model=OPENAI.example_model)
    specs = [
        AgentSpec(name=f"sliced-{i}", llm_config=config, memory_blocks=[NewBlock(label="human", value=f"agent {i}")])
        for i in range(count)
    ]
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        return await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))


async def _encoded(
    engine: AsyncEngine,
    agents: Sequence[Agent],
    *,
    slice_messages: int,
    refuse: str = "",
    known: Mapping[str, Message] | None = None,
    cache: MessageCache | None = None,
) -> tuple[EncodedRequests, dict[str, str], list[str]]:
    """What ``encoded_requests`` gives, and the statements that read the windows, each with its
    parameters."""

    def encode(custom_id: str, request: ModelRequest) -> bytes:
        if custom_id == refuse:
            raise ProviderError("a tool of the request: no translation", kind=ProviderErrorKind.INVALID_REQUEST)
        return OPENAI.encode_request(custom_id, request)

    reads: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM messages" in statement:
            reads.append(f"{statement} {_args[0]!r}")

    states = {a.id: StepState() for a in agents}
    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        async with engine.connect() as conn:
            encoded, problems = await encoded_requests(
                conn, agents, states, IN_CALL, encode, known=known, cache=cache, slice_messages=slice_messages
            )
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)
    return encoded, problems, reads


async def test_slices_of_windows_send_what_one_read_does(engine: AsyncEngine) -> None:
    agents = await _agents(engine, 5)
    window = len(agents[0].message_ids)

    whole, no_problems, one_read = await _encoded(engine, agents, slice_messages=10**6)
    sliced, none_either, reads = await _encoded(engine, agents, slice_messages=2 * window)

    assert (len(one_read), len(reads)) == (1, 3)  # two agents' windows a slice: 2 + 2 + 1
    assert list(sliced) == list(whole) == [a.id for a in agents]
    assert sliced == whole
    assert no_problems == none_either == {}
    line = orjson.loads(whole[agents[0].id])
    assert (line["custom_id"], line["url"], line["body"]["model"]) == (
        agents[0].id,
        "/v1/chat/completions",
        OPENAI.example_model,
    )


async def test_a_request_the_provider_cannot_take_fails_its_agent_alone(engine: AsyncEngine) -> None:
    agents = await _agents(engine, 3)

    encoded, problems, _ = await _encoded(engine, agents, slice_messages=10**6, refuse=agents[1].id)

    assert list(encoded) == [agents[0].id, agents[2].id]
    assert problems == {agents[1].id: "the provider cannot take it: a tool of the request: no translation"}


async def test_the_messages_in_hand_are_not_read_again_and_change_nothing(engine: AsyncEngine) -> None:
    """A step's submit is handed what it just wrote (``StepInputs.known``): those messages are
    left out of the read, and the requests are the same bytes as when every message is read."""
    agents = await _agents(engine, 3)
    async with engine.connect() as conn:
        systems = await message_store.get_messages(conn, [a.message_ids[0] for a in agents])

    read, _, reads = await _encoded(engine, agents, slice_messages=10**6)
    handed, problems, fewer = await _encoded(engine, agents, slice_messages=10**6, known=systems)

    assert handed == read and problems == {}
    assert len(fewer) == 1
    assert all(i in reads[0] for i in systems)
    assert not any(i in fewer[0] for i in systems)
    assert all(i in fewer[0] for a in agents for i in a.message_ids[1:])


async def test_a_cache_reads_each_message_once_but_the_first_of_each_window(engine: AsyncEngine) -> None:
    """A poller's submits keep what they read (``store/message_cache.py``): the next submit reads
    only the windows' first messages, which are rewritten in place when an agent's memory changes,
    and sends the same bytes."""
    agents = await _agents(engine, 3)
    firsts = [a.message_ids[0] for a in agents]
    cache = MessageCache(10**8)

    plain, _, _ = await _encoded(engine, agents, slice_messages=10**6)
    first, _, first_reads = await _encoded(engine, agents, slice_messages=10**6, cache=cache)
    again, problems, reads = await _encoded(engine, agents, slice_messages=10**6, cache=cache)

    assert plain == first == again and problems == {}
    assert all(i in first_reads[0] for a in agents for i in a.message_ids)
    assert len(reads) == 1 and all(i in reads[0] for i in firsts)
    assert not any(i in reads[0] for a in agents for i in a.message_ids[1:])
    assert len(cache) == sum(len(a.message_ids) - 1 for a in agents)

    async with engine.begin() as conn:
        await message_store.update_system_texts(conn, [(firsts[0], "You are a rewritten prompt.")])
    rewritten, _, _ = await _encoded(engine, agents, slice_messages=10**6, cache=cache)
    assert b"You are a rewritten prompt." in rewritten[agents[0].id]
    assert rewritten[agents[1].id] == plain[agents[1].id]


async def test_a_full_cache_keeps_what_is_in_use_and_gives_up_the_least_recently_used(engine: AsyncEngine) -> None:
    """Windows that hold more than the cache keep a part of them from one step to the next; what
    has not been used for ``IN_USE_SECONDS`` makes room, the least recently used first."""
    agents = await _agents(engine, 4)
    a, b, c, d = (agent.message_ids[1] for agent in agents)  # each agent's first reply: the same size
    clock = ManualClock()
    async with engine.connect() as conn:
        size = held_bytes((await message_store.get_messages(conn, [a]))[a])
        cache = MessageCache(2 * size + size // 2, clock=clock)  # room for two
        await cache.get(conn, [a, b, c])
        assert (a in cache, b in cache, c in cache) == (True, True, False)  # a and b are in use
        assert cache.held.held_bytes == 2 * size <= cache.held.max_bytes

        clock.advance(IN_USE_SECONDS / 2)
        await cache.get(conn, [a])  # a is used again: b is the least recently used
        clock.advance(IN_USE_SECONDS / 2)
        await cache.get(conn, [c, d])  # b has not been used for IN_USE_SECONDS, a has
        assert (a in cache, b in cache, c in cache, d in cache) == (True, False, True, False)
        assert cache.held.held_bytes == 2 * size

        small = MessageCache(size - 1)
        found = await small.get(conn, [a, b])
    assert set(found) == {a, b} and len(small) == 0 and small.held.held_bytes == 0  # read, too big to keep


async def test_two_reads_of_the_same_message_at_once_keep_it_once(engine: AsyncEngine) -> None:
    agents = await _agents(engine, 1)
    ids = list(agents[0].message_ids[1:])
    cache = MessageCache(10**8)
    async with engine.connect() as one, engine.connect() as other:
        first, second = await asyncio.gather(cache.get(one, ids), cache.get(other, ids))
        alone = MessageCache(10**8)
        await alone.get(one, ids)
    assert first == second and len(cache) == len(ids)
    assert cache.held.held_bytes == alone.held.held_bytes


async def test_the_cache_counts_at_least_what_its_messages_take(engine: AsyncEngine) -> None:
    """The bound is on an estimate (``held_bytes``): the memory the messages of new agents' windows
    really take, as allocated, is within a tenth over it, and not far under."""
    agents = await _agents(engine, 100)
    ids = [i for a in agents for i in a.message_ids[1:]]
    cache = MessageCache(10**9)
    async with engine.connect() as conn:
        await message_store.get_messages(conn, ids[:1])  # the statement compiled before counting
        with allocated() as taken:
            await cache.get(conn, ids)
    estimate = cache.held.held_bytes
    assert len(cache) == len(ids)
    assert 0.7 * estimate <= taken.bytes <= 1.1 * estimate, (taken.bytes / len(ids), estimate / len(ids))
