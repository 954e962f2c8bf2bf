"""Whatever history we translate, the API checks (as the emulator applies them) accept the request.

The histories include tool-call ids made by the other provider, by old nightshift versions (41
characters) and by other clients: the wire layer must make each acceptable to each provider.
"""

from __future__ import annotations

import pytest

from nightshift.domain.messages import Image, Message, Role, ToolCall
from nightshift.emulator import anthropic_checks, gemini_checks, openai_checks
from nightshift.providers.anthropic import wire as anthropic_wire
from nightshift.providers.base import ModelRequest
from nightshift.providers.google_ai import wire as google_ai_wire
from nightshift.providers.openai import wire as openai_wire
from support.messages import msg

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
TOOL = {"name": "send_message", "description": "Send.", "parameters": {"type": "object", "properties": {}}}
# A tool with typed, nested and optional arguments (Gemini takes an OpenAPI subset of JSON Schema).
NOTE = {
    "name": "note",
    "description": "Take a note.",
    "parameters": {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            "due": {"type": ["string", "null"], "format": "date-time"},
            "meta": {"$ref": "#/$defs/meta"},
        },
        "required": ["text"],
        "$defs": {"meta": {"type": "object", "properties": {"weight": {"type": "integer"}}}},
    },
}


def call(call_id: str, arguments: str = "{}") -> tuple[ToolCall, ...]:
    return (ToolCall(id=call_id, name="send_message", arguments=arguments),)


HISTORIES = {
    "empty": [],
    "assistant first": [msg(Role.ASSISTANT, "Hello, I am Sam."), msg(Role.USER, "hi")],
    "full step": [
        msg(Role.USER, "hi"),
        msg(Role.ASSISTANT, reasoning="greet", tool_calls=call("c1")),
        msg(Role.TOOL, "ok", tool_call_id="c1"),
        msg(Role.USER, '{"type": "heartbeat"}'),
        msg(Role.ASSISTANT, reasoning="done", tool_calls=call("c2", '{"message": "bye"}')),
        msg(Role.TOOL, "ok", tool_call_id="c2"),
    ],
    "orphan result": [msg(Role.TOOL, "stale", tool_call_id="gone"), msg(Role.USER, "hi")],
    "call without result": [msg(Role.USER, "hi"), msg(Role.ASSISTANT, tool_calls=call("c1")), msg(Role.USER, "?")],
    "trailing call": [msg(Role.USER, "hi"), msg(Role.ASSISTANT, tool_calls=call("c1"))],
    "malformed arguments": [
        msg(Role.USER, "hi"),
        msg(Role.ASSISTANT, tool_calls=call("c1", "{oops")),
        msg(Role.TOOL, "error", tool_call_id="c1", is_error=True),
    ],
    "wrong result after a call": [
        msg(Role.USER, "hi"),
        msg(Role.ASSISTANT, tool_calls=call("c1")),
        msg(Role.TOOL, "x", tool_call_id="c9"),
    ],
    "the old 41-character greeting id": [
        msg(Role.ASSISTANT, tool_calls=call("call-0192f0c4-1a2b-7c3d-8e4f-a5b6c7d8e9f0")),
        msg(Role.TOOL, "ok", tool_call_id="call-0192f0c4-1a2b-7c3d-8e4f-a5b6c7d8e9f0"),
        msg(Role.USER, "hi"),
    ],
    "ids another provider made": [
        msg(Role.USER, "hi"),
        msg(Role.ASSISTANT, tool_calls=call("toolu_01AbmHJypDhKqBF7NKdRPJ6d")),
        msg(Role.TOOL, "ok", tool_call_id="toolu_01AbmHJypDhKqBF7NKdRPJ6d"),
        msg(Role.ASSISTANT, tool_calls=call("call_sS3HejVTEiGEJGwTW7bxHKh8")),
        msg(Role.TOOL, "ok", tool_call_id="call_sS3HejVTEiGEJGwTW7bxHKh8"),
    ],
    "ids with characters Anthropic refuses": [
        msg(Role.USER, "hi"),
        msg(Role.ASSISTANT, tool_calls=call("call_a|fc_b")),
        msg(Role.TOOL, "ok", tool_call_id="call_a|fc_b"),
        msg(Role.ASSISTANT, tool_calls=call("x" * 80)),
    ],
    "images, by bytes and by url, with and without text": [
        msg(Role.USER, "what is this?", images=(Image(media_type="image/png", data=PNG),)),
        msg(Role.ASSISTANT, tool_calls=call("c1")),
        msg(Role.TOOL, "ok", tool_call_id="c1"),
        msg(Role.USER, "", images=(Image(url="https://example.com/cat.jpg"), Image(media_type="image/gif", data=PNG))),
    ],
    "system in the middle and empty texts": [
        msg(Role.USER, ""),
        msg(Role.SYSTEM, "note"),
        msg(Role.ASSISTANT, ""),
        msg(Role.USER, "hi"),
    ],
}


@pytest.mark.parametrize("history", HISTORIES.values(), ids=HISTORIES.keys())
def test_anthropic_accepts(history: list[Message]) -> None:
    request = ModelRequest(model="claude", system="S", messages=tuple(history), tools=(TOOL,), temperature=0.5)

    anthropic_checks.check_params(anthropic_wire.build_request(request), version=anthropic_checks.STRICT_VERSION)


@pytest.mark.parametrize("history", HISTORIES.values(), ids=HISTORIES.keys())
def test_openai_accepts(history: list[Message]) -> None:
    request = ModelRequest(model="gpt", system="S", messages=tuple(history), tools=(TOOL,), temperature=0.5)

    openai_checks.check_body(openai_wire.build_request(request))


@pytest.mark.parametrize("agent_arguments", [True, False], ids=["memgpt", "letta_v1"])
@pytest.mark.parametrize("history", HISTORIES.values(), ids=HISTORIES.keys())
def test_gemini_accepts(history: list[Message], agent_arguments: bool) -> None:
    request = ModelRequest(
        model="gemini-2.5-flash",
        system="S",
        messages=tuple(history),
        tools=(TOOL, NOTE),
        temperature=0.5,
        forced_tool="send_message",
        agent_arguments=agent_arguments,
    )

    gemini_checks.check_body(google_ai_wire.build_request(request))
