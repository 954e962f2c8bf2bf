"""``to_letta_messages``: one stored message as Letta's messages, in the view a send asked for."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from nightshift.api.letta_messages import LettaView, to_letta_messages
from nightshift.domain.messages import Message, Role, ToolCall

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _message(role: Role, text: str = "", **fields: object) -> Message:
    return Message(
        id="message-0192f0c4-0000-7000-8000-000000000001",
        organization_id="org-1",
        agent_id="agent-1",
        role=role,
        text=text,
        created_at=NOW,
        run_id="run-1",
        step_id="step-1",
        **fields,  # type: ignore[arg-type]
    )


def _turn() -> Message:
    calls = (
        ToolCall(id="call-1", name="lookup", arguments=json.dumps({"order_id": "A1"})),
        ToolCall(id="call-2", name="send_message", arguments=json.dumps({"message": "Shipped."})),
    )
    return _message(Role.ASSISTANT, reasoning="Look it up, then say so.", tool_calls=calls)


def test_an_assistant_turn_by_default() -> None:
    parts = to_letta_messages(_turn())
    assert [p["message_type"] for p in parts] == ["reasoning_message", "tool_call_message", "assistant_message"]
    assert parts[1]["tool_call"] == {"name": "lookup", "arguments": '{"order_id": "A1"}', "tool_call_id": "call-1"}
    assert parts[2]["content"] == "Shipped."
    assert {(p["run_id"], p["step_id"], p["id"]) for p in parts} == {("run-1", "step-1", _turn().id)}
    otids = [p["otid"] for p in parts]
    assert len(set(otids)) == 3 and otids == [p["otid"] for p in to_letta_messages(_turn())]


def test_without_the_assistant_message_send_message_is_a_tool_call() -> None:
    parts = to_letta_messages(_turn(), LettaView(use_assistant_message=False))
    assert [p["message_type"] for p in parts] == ["reasoning_message", "tool_call_message", "tool_call_message"]
    assert parts[2]["tool_call"]["name"] == "send_message"


def test_another_tool_and_argument_as_the_assistants_voice() -> None:
    parts = to_letta_messages(_turn(), LettaView(assistant_tool="lookup", assistant_kwarg="order_id"))
    assert [(p["message_type"], p.get("content")) for p in parts[1:]] == [
        ("assistant_message", "A1"),
        ("tool_call_message", None),
    ]
    # A call without that argument stays a tool call.
    parts = to_letta_messages(_turn(), LettaView(assistant_tool="lookup", assistant_kwarg="missing"))
    assert parts[1]["message_type"] == "tool_call_message"


def test_only_the_types_asked_for() -> None:
    view = LettaView(types=frozenset({"assistant_message", "tool_return_message"}))
    assert [p["message_type"] for p in to_letta_messages(_turn(), view)] == ["assistant_message"]
    tool = _message(Role.TOOL, '{"status": "OK"}', name="send_message", tool_call_id="call-2")
    assert [p["message_type"] for p in to_letta_messages(tool, view)] == ["tool_return_message"]
    user = _message(Role.USER, "hi")
    assert to_letta_messages(user, view) == []


def test_an_input_keeps_its_otid() -> None:
    given = _message(Role.USER, "hi", otid="client-otid-7")
    (part,) = to_letta_messages(given)
    assert (part["message_type"], part["content"], part["otid"]) == ("user_message", "hi", "client-otid-7")
    (derived,) = to_letta_messages(_message(Role.USER, "hi"))
    assert derived["otid"] and derived["otid"] != "client-otid-7"
