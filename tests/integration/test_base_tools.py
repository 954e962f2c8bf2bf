"""Base tools against a real database: memory edits within limits, archival and recall search."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.messages import Message, MessageKind, Role, ToolCall
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.domain.passages import Passage
from nightshift.errors import ToolError
from nightshift.ids import new_id
from nightshift.runtime.search import StoreSearch
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.store import messages as message_store
from nightshift.store import passages as passage_store
from nightshift.store.orgs import ensure_default_org
from nightshift.tools.base import AgentContext, run_base_tool

CONFIG = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022")


@pytest.fixture
async def conn(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    async with engine.begin() as connection:
        await ensure_default_org(connection, datetime.now(UTC))
        yield connection


@pytest.fixture
async def agent(conn: AsyncConnection) -> Agent:
    spec = AgentSpec(
        name="ada",
        llm_config=CONFIG,
        memory_blocks=[
            NewBlock(label="human", value="Likes tea.", limit=40),
            NewBlock(label="persona", value="Archivist.", read_only=True),
        ],
    )
    (created,) = await create_agents(conn, DEFAULT_ORG_ID, [spec], now=datetime.now(UTC))
    return created


def context(agent: Agent, conn: AsyncConnection) -> AgentContext:
    return AgentContext(
        agent_id=agent.id, blocks={b.label: b for b in agent.blocks}, search=StoreSearch(conn), now=datetime.now(UTC)
    )


async def test_memory_edits_change_the_working_copy(agent: Agent, conn: AsyncConnection) -> None:
    ctx = context(agent, conn)
    await run_base_tool("core_memory_append", ctx, {"label": "human", "content": "Owns a cat."})
    assert ctx.blocks["human"].value == "Likes tea.\nOwns a cat."
    await run_base_tool("core_memory_replace", ctx, {"label": "human", "old_content": "tea", "new_content": "coffee"})
    assert ctx.blocks["human"].value == "Likes coffee.\nOwns a cat."
    await run_base_tool("rethink_memory", ctx, {"new_memory": "Name: Sam.", "target_block_label": "human"})
    assert ctx.blocks["human"].value == "Name: Sam."
    assert ctx.changed_labels == {"human"}


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("core_memory_append", {"label": "human", "content": "x" * 40}, "over its limit of 40"),
        ("rethink_memory", {"new_memory": "y" * 41, "target_block_label": "human"}, "over its limit of 40"),
        ("core_memory_replace", {"label": "human", "old_content": "milk", "new_content": "x"}, "not found"),
        ("core_memory_append", {"label": "nope", "content": "x"}, "no memory block labelled 'nope'"),
        ("core_memory_append", {"label": "persona", "content": "x"}, "read-only"),
        ("core_memory_append", {"label": "human"}, "bad arguments"),
        ("archival_memory_insert", {"content": "  "}, "empty"),
    ],
)
async def test_refused_edits_are_tool_errors_and_change_nothing(
    agent: Agent, conn: AsyncConnection, name: str, arguments: dict[str, str], message: str
) -> None:
    ctx = context(agent, conn)
    with pytest.raises(ToolError, match=message):
        await run_base_tool(name, ctx, arguments)
    assert ctx.blocks["human"].value == "Likes tea."
    assert ctx.changed_labels == set()
    assert ctx.new_passages == []


async def test_archival_insert_then_ranked_paged_search(agent: Agent, conn: AsyncConnection) -> None:
    ctx = context(agent, conn)
    texts = [
        "The lighthouse keeper painted the tower red.",
        "Bread recipe: flour, water, salt, yeast.",
        "The lighthouse lamp is checked every night; the lighthouse log records it.",
        "Cats sleep most of the day.",
    ]
    for text in texts:
        assert await run_base_tool("archival_memory_insert", ctx, {"content": text}) == "Saved to archival memory."
    now = datetime.now(UTC)
    await passage_store.insert_passages(
        conn,
        [
            Passage(id=new_id("passage"), organization_id=DEFAULT_ORG_ID, agent_id=agent.id, text=t, created_at=now)
            for t in ctx.new_passages
        ],
    )
    found = json.loads(await run_base_tool("archival_memory_search", ctx, {"query": "lighthouse"}))
    contents = [r["content"] for r in found["results"]]
    # The passage that says "lighthouse" twice ranks first; unrelated passages do not match.
    assert contents == [texts[2], texts[0]]
    assert (
        json.loads(await run_base_tool("archival_memory_search", ctx, {"query": "lighthouse", "page": 1}))["results"]
        == []
    )
    assert json.loads(await run_base_tool("archival_memory_search", ctx, {"query": "*** )("}))["results"] == []
    stemmed = json.loads(await run_base_tool("archival_memory_search", ctx, {"query": "sleeping cats"}))
    assert [r["content"] for r in stemmed["results"]] == [texts[3]]
    assert (await passage_store.count_passages(conn, [agent.id]))[agent.id] == 4


async def test_conversation_search_finds_user_send_message_and_tool_result_text(
    agent: Agent, conn: AsyncConnection
) -> None:
    base = datetime.now(UTC)

    def message(role: Role, text: str, minutes: int, **extra: Any) -> Message:
        return Message(
            id=new_id("message"),
            organization_id=DEFAULT_ORG_ID,
            agent_id=agent.id,
            role=role,
            text=text,
            created_at=base + timedelta(minutes=minutes),
            **extra,
        )

    call = ToolCall(id="call-1", name="send_message", arguments=json.dumps({"message": "Your parrot is called Kiwi."}))
    await message_store.insert_messages(
        conn,
        [
            message(Role.USER, "My parrot is green and loud.", 1),
            message(Role.ASSISTANT, "", 2, reasoning="note the parrot", tool_calls=(call,)),
            message(
                Role.TOOL,
                json.dumps({"status": "OK", "message": "parrot tool output", "time": "2026-12-01T00:00:00"}),
                3,
                tool_call_id="call-1",
                name="send_message",
            ),
            message(Role.USER, "What is the weather?", 4),
            message(Role.USER, '{"type": "heartbeat", "reason": "parrot"}', 5, kind=MessageKind.HEARTBEAT),
        ],
    )
    ctx = context(agent, conn)
    found = json.loads(await run_base_tool("conversation_search", ctx, {"query": "parrot"}))
    roles = sorted(r["role"] for r in found["results"])
    # What tools returned is found (an evicted tool result stays in recall memory); heartbeats are not.
    assert roles == ["assistant", "tool", "user"]
    texts = {r["text"] for r in found["results"]}
    assert "My parrot is green and loud." in texts
    assert "parrot tool output" in texts  # what the tool returned, without the status and time around it
    # The assistant's turn shows as what the user saw (send_message), found through its reasoning.
    assert "Your parrot is called Kiwi." in texts
