"""Reading, checking and writing Agent Files, without a server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from nightshift.domain.agent_file_export import export_agent_file
from nightshift.domain.agent_files import decode_agent_file, parse_agent_file
from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.blocks import Block
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.domain.tool_rules import TerminalToolRule
from nightshift.domain.tools import Tool, ToolType
from nightshift.errors import InvalidInput
from support.agent_files import SCREENING, SUPPORT_DESK, document, double_encoded

NOW = datetime(2026, 11, 5, 12, 0, tzinfo=UTC)


def test_plain_and_double_encoded_files_read_the_same() -> None:
    doc = document(SUPPORT_DESK)
    assert decode_agent_file(json.dumps(doc).encode()) == decode_agent_file(SUPPORT_DESK.read_bytes()) == doc
    parsed = parse_agent_file(SCREENING.read_bytes())
    assert [r["type"] for r in parsed.agents[0].tool_rules or []][:2] == ["run_first", "constrain_child_tools"]


def _tess(change: Any) -> bytes:
    doc = document(SUPPORT_DESK)
    change(doc["agents"][0])
    return double_encoded(doc)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff\xfe", "not JSON"),
        (json.dumps("just text").encode(), "not JSON"),
        (b'{"agents": {}}', "not an Agent File"),
        (_tess(lambda a: a["in_context_message_ids"].remove("message-7")), "call_note01 (message message-6)"),
        (_tess(lambda a: a["in_context_message_ids"].append("message-0")), "lists a message twice"),
        (_tess(lambda a: a["in_context_message_ids"].append("message-99")), "message-99"),
        (_tess(lambda a: a["messages"][3].update(role="developer")), "role 'developer'"),
        (_tess(lambda a: a.update(source_ids=["source-0"])), "source_ids"),
        (_tess(lambda a: a.update(tags=["t"] * 101)), "tags"),
    ],
)
def test_what_is_wrong_with_a_file_is_named(raw: bytes, expected: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_agent_file(raw)
    assert expected in caught.value.message
    assert caught.value.field == "file"


def _agent(agent_id: str, blocks: tuple[Block, ...], tools: tuple[Tool, ...], message_ids: tuple[str, ...]) -> Agent:
    return Agent(
        id=agent_id,
        organization_id="org-1",
        name=agent_id,
        system="Be kind.",
        llm_config=LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022"),
        blocks=blocks,
        tools=tools,
        tool_rules=(TerminalToolRule(tool_name="send_message"),),
        message_ids=message_ids,
        secrets={"API_KEY": "s3cret"},
        created_at=NOW,
        updated_at=NOW,
    )


def test_an_export_uses_the_files_own_ids_and_hides_secret_values() -> None:
    def block(block_id: str, label: str) -> Block:
        return Block(id=block_id, organization_id="org-1", label=label, value=label, created_at=NOW, updated_at=NOW)

    def tool(tool_id: str, name: str) -> Tool:
        schema = {"name": name, "description": name, "parameters": {"type": "object", "properties": {}}}
        return Tool(
            id=tool_id,
            organization_id="org-1",
            name=name,
            description=name,
            json_schema=schema,
            tool_type=ToolType.BASE,
            created_at=NOW,
            updated_at=NOW,
        )

    def message(message_id: str, role: Role, **extra: Any) -> Message:
        return Message(
            id=message_id, organization_id="org-1", agent_id="agent-a", role=role, text="", created_at=NOW, **extra
        )

    shared, persona = block("block-x", "shared"), block("block-y", "persona")
    send, search = tool("tool-x", "send_message"), tool("tool-y", "conversation_search")
    history = [
        message("m-old", Role.USER),
        message("m-sys", Role.SYSTEM),
        message("m-call", Role.ASSISTANT, tool_calls=(ToolCall(id="c1", name="send_message", arguments="{}"),)),
        message("m-result", Role.TOOL, tool_call_id="c1", is_error=True),
    ]
    first = _agent("agent-a", (shared, persona), (send, search), ("m-sys", "m-call", "m-result"))
    second = _agent("agent-b", (shared,), (send,), ())
    exported = export_agent_file([first, second], {"agent-a": history}, created_at=NOW)
    assert [b["label"] for b in exported["blocks"]] == ["persona", "shared"]
    assert [t["name"] for t in exported["tools"]] == ["conversation_search", "send_message"]
    one, two = exported["agents"]
    assert one["block_ids"] == ["block-1", "block-0"] and two["block_ids"] == ["block-1"]
    assert one["tool_ids"] == ["tool-1", "tool-0"]
    assert [m["id"] for m in one["messages"]] == ["message-0", "message-1", "message-2", "message-3"]
    assert one["in_context_message_ids"] == ["message-1", "message-2", "message-3"]
    assert one["messages"][3]["tool_returns"][0]["status"] == "error"
    assert one["tool_exec_environment_variables"] == {"API_KEY": ""}
    assert "s3cret" not in json.dumps(exported)
    assert one["tool_rules"] == [{"tool_name": "send_message", "type": "exit_loop"}]
    assert parse_agent_file(json.dumps(exported).encode()).agents[1].messages == []
