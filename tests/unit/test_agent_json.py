"""``api/agent_json``: the bytes of an agent read are the ones pydantic writes for AgentPublic."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import TypeAdapter

from nightshift.api.agent_json import agent_response, agents_response
from nightshift.api.schemas import AgentPublic, AgentRelation
from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.blocks import Block
from nightshift.domain.groups import Group, ManagerType
from nightshift.domain.tool_rules import (
    ChildToolRule,
    ConditionalToolRule,
    InitToolRule,
    MaxCountPerStepToolRule,
    TerminalToolRule,
)
from nightshift.domain.tools import Tool, ToolType

WHOLE = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
PRECISE = datetime(2026, 1, 2, 3, 4, 5, 120_000, tzinfo=UTC)

SEND = Tool(
    id="tool-send",
    organization_id="org-1",
    name="send_message",
    description="Sends a message to the human user.",
    json_schema={
        "name": "send_message",
        "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
    },
    tool_type=ToolType.BASE,
    created_at=WHOLE,
    updated_at=PRECISE,
)
LOOKUP = Tool(
    id="tool-lookup",
    organization_id="org-1",
    name="lookup_order",
    description="Looks an order up — «quoted», 注文.",
    json_schema={"name": "lookup_order", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    tool_type=ToolType.CUSTOM,
    source_code='def lookup_order(n: int) -> str:\n    """Looks an order up."""\n    return "\\u0001"\n',
    args_json_schema={"title": "Args", "type": "object"},
    tags=("orders", "shop"),
    return_char_limit=1_000,
    metadata={"owner": {"team": "shop", "weights": [0.5, 1e-7, 12345678901234]}},
    created_at=PRECISE,
    updated_at=PRECISE,
)


def _block(label: str, **fields: Any) -> Block:
    return Block(
        id=f"block-{label}",
        organization_id="org-1",
        label=label,
        value=(
            f'The {label} block.\nLine two: tab\there, quote " and backslash \\, '
            "controls \x01\x1f\x7f, </script> \u2028."
        ),
        created_at=WHOLE,
        updated_at=PRECISE,
        **fields,
    )


PLAIN = Agent(
    id="agent-plain",
    organization_id="org-1",
    name="plain",
    system="You are plain.",
    llm_config=LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022"),
    created_at=WHOLE,
    updated_at=WHOLE,
)
FULL = Agent(
    id="agent-full",
    organization_id="org-1",
    name="full — ünïcode 🙂",
    system="System\nwith lines",
    description="An agent with everything.",
    llm_config=LLMConfig(
        provider="openai",
        model="gpt-4o-mini",
        context_window=64_000,
        max_tokens=2_048,
        temperature=0.7,
        parallel_tool_calls=False,
    ),
    embedding="openai/text-embedding-3-small",
    blocks=(
        _block("persona"),
        _block("human", limit=9_000, description="who", read_only=True, metadata={"k": [1, None, True]}),
    ),
    tools=(SEND, LOOKUP),
    tool_rules=(
        InitToolRule(tool_name="lookup_order"),
        ChildToolRule(tool_name="lookup_order", children=["send_message"]),
        ConditionalToolRule(tool_name="lookup_order", child_output_mapping={"1": "send_message"}),
        MaxCountPerStepToolRule(tool_name="lookup_order", max_count_limit=2),
        TerminalToolRule(tool_name="send_message"),
    ),
    tags=("a", "b"),
    metadata={"nested": {"list": [1, 2.5, "x", None, False]}, "empty": {}},
    message_ids=("message-1", "message-2"),
    context_tokens=1_234,
    message_buffer_autoclear=True,
    secrets={"TOKEN": "s3cret", "API": "k"},
    created_at=PRECISE,
    updated_at=PRECISE,
)

GROUP = Group(
    id="group-1",
    organization_id="org-1",
    manager_type=ManagerType.SLEEPTIME,
    description="keeps — «memory»",
    agent_ids=("agent-helper",),
    manager_agent_id="agent-main",
    sleeptime_agent_frequency=None,
    turns_counter=7,
    last_processed_message_id="message-9",
    shared_block_ids=("block-persona",),
    hidden=False,
    created_at=WHOLE,
    updated_at=PRECISE,
)
MAIN = replace(PLAIN, id="agent-main", managed_group_id=GROUP.id, group=GROUP)

INCLUDES: list[list[AgentRelation] | None] = [
    None,
    [],
    ["agent.blocks"],
    ["agent.tags", "agent.tools"],
    ["agent.secrets", "agent.sources"],
]


@pytest.mark.parametrize("include", INCLUDES)
@pytest.mark.parametrize("agent", [PLAIN, FULL], ids=["plain", "full"])
def test_one_agent_is_what_pydantic_writes(agent: Agent, include: list[AgentRelation] | None) -> None:
    expected = TypeAdapter(AgentPublic).dump_json(AgentPublic.of(agent, include=include))
    response = agent_response(agent, include=include)
    assert response.body == expected
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize("include", INCLUDES)
def test_agents_sharing_tools_are_what_pydantic_writes(include: list[AgentRelation] | None) -> None:
    agents = [FULL, PLAIN, FULL, FULL]
    expected = TypeAdapter(list[AgentPublic]).dump_json(AgentPublic.many(agents, include=include))
    assert agents_response(agents, include=include).body == expected
    assert agents_response([]).body == b"[]"


@pytest.mark.parametrize("include", [*INCLUDES, ["agent.managed_group"]])
def test_agents_with_their_groups_are_what_pydantic_writes(include: list[AgentRelation] | None) -> None:
    agents = [MAIN, FULL, MAIN]
    expected = TypeAdapter(list[AgentPublic]).dump_json(AgentPublic.many(agents, include=include))
    assert agents_response(agents, include=include).body == expected
    one = TypeAdapter(AgentPublic).dump_json(AgentPublic.of(MAIN, include=include))
    assert agent_response(MAIN, include=include).body == one
    shown = AgentPublic.of(MAIN, include=include)
    assert shown.enable_sleeptime is True
    if include is None or "agent.managed_group" in include:
        assert shown.managed_group is not None and shown.managed_group.agent_ids == ["agent-helper"]
        assert shown.multi_agent_group == shown.managed_group
    else:
        assert shown.managed_group is None and shown.multi_agent_group is None


def test_secrets_never_show_their_values() -> None:
    assert b"s3cret" not in agent_response(FULL).body
