"""A batch's requests are built a slice of windows at a time and encoded for the provider as soon
as each is built (``runtime.context.encoded_requests``): the slices change nothing of what is sent,
and a request the provider refuses to encode fails its agent alone."""

from __future__ import annotations

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
from nightshift.store.orgs import ensure_default_org

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
                conn, agents, states, IN_CALL, encode, known=known, slice_messages=slice_messages
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
