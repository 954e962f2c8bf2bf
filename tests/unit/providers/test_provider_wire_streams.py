"""The providers' stream events folded into answers (``wire.StreamAssembler``), and the emulator's streams."""

from __future__ import annotations

import json
from typing import Any

from nightshift.emulator.streams import anthropic_events, openai_chunks, pieces
from nightshift.providers.anthropic import wire as anthropic_wire
from nightshift.providers.base import TextDelta, ToolCallDelta
from nightshift.providers.openai import wire as openai_wire

ARGUMENTS = {"inner_thoughts": "Check the weather.", "city": "Paris", "request_heartbeat": True}


def anthropic_stream() -> list[dict[str, Any]]:
    """A streamed tool call as the Messages API sends it: text, then a tool_use in three pieces."""
    text = json.dumps(ARGUMENTS)
    start: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-5-haiku",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 7},
    }
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
        },
        *[
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": p}}
            for p in (text[:10], text[10:31], text[31:])
        ],
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 30, "input_tokens": None},
        },
        {"type": "message_stop"},
    ]


def test_anthropic_events_give_deltas_then_the_answer() -> None:
    assembler = anthropic_wire.StreamAssembler()
    deltas = [d for event in anthropic_stream() for d in assembler.feed(event)]

    assert deltas[:2] == [TextDelta(text="Let me "), TextDelta(text="look.")]
    calls = deltas[2:]
    assert calls[0] == ToolCallDelta(index=0, id="toolu_1", name="get_weather")
    assert all(isinstance(d, ToolCallDelta) and d.index == 0 for d in calls)
    assert json.loads("".join(d.arguments for d in calls if isinstance(d, ToolCallDelta))) == ARGUMENTS

    response = assembler.response()
    assert response.text == "Let me look."
    assert response.tool_call is not None
    assert (response.tool_call.id, response.tool_call.name) == ("toolu_1", "get_weather")
    assert json.loads(response.tool_call.arguments) == {"city": "Paris"}
    assert (response.reasoning, response.request_heartbeat) == ("Check the weather.", True)
    assert response.stop_reason == "tool_use"
    # message_delta's counts replace the start's; those it leaves out (or sends as null) stay.
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.cache_read_tokens) == (40, 30, 7)


def test_anthropic_arguments_that_are_not_json_are_kept() -> None:
    assembler = anthropic_wire.StreamAssembler()
    events = anthropic_stream()
    cut = [e for e in events if e.get("delta", {}).get("type") != "input_json_delta"]
    cut.insert(
        7, {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{"}}
    )
    for event in cut:
        assembler.feed(event)

    call = assembler.response().tool_call
    assert call is not None and call.arguments == "{"


def openai_stream() -> list[dict[str, Any]]:
    """A streamed completion with two tool calls, as Chat Completions sends it with include_usage."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini", "usage": None}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    first, second = json.dumps(ARGUMENTS), json.dumps({"city": "Rome"})
    return [
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        *[chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces(first)],
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": second},
                    }
                ]
            }
        ),
        chunk({}, "tool_calls"),
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 50, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 10}},
        },
    ]


def test_openai_chunks_give_deltas_then_the_answer() -> None:
    assembler = openai_wire.StreamAssembler()
    deltas = [d for chunk in openai_stream() for d in assembler.feed(chunk)]

    assert all(isinstance(d, ToolCallDelta) for d in deltas)
    assert deltas[0] == ToolCallDelta(index=0, id="call_a", name="get_weather")
    firsts = [d for d in deltas if isinstance(d, ToolCallDelta) and d.index == 0]
    assert json.loads("".join(d.arguments for d in firsts)) == ARGUMENTS
    assert deltas[-1] == ToolCallDelta(index=1, id="call_b", name="get_weather", arguments='{"city": "Rome"}')

    response = assembler.response()
    assert [(c.id, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("call_a", {"city": "Paris"}),
        ("call_b", {"city": "Rome"}),
    ]
    assert response.reasoning == "Check the weather." and response.request_heartbeat
    assert response.stop_reason == "tool_calls" and response.text is None
    assert (response.usage.input_tokens, response.usage.cache_read_tokens, response.usage.output_tokens) == (40, 10, 20)


def _sse_data(raw: bytes) -> list[dict[str, Any]]:
    events = raw.decode().split("\n\n")
    assert events[-1] == ""
    return [json.loads(e.split("data: ", 1)[1]) for e in events[:-1] if "data: [DONE]" not in e]


def test_emulator_streams_fold_back_into_the_answers() -> None:
    message = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-5-haiku",
        "content": [
            {"type": "text", "text": "Looking it up for you now."},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": ARGUMENTS},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 34},
    }
    raw = b"".join(anthropic_events(message))
    assert raw.startswith(b"event: message_start\ndata: ") and raw.endswith(
        b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    )
    assembler = anthropic_wire.StreamAssembler()
    for event in _sse_data(raw):
        assembler.feed(event)
    assert assembler.response() == anthropic_wire.parse_message(message)

    completion = {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "created": 2,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_c",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS)},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17},
    }
    raw = b"".join(openai_chunks(completion, include_usage=True))
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = _sse_data(raw)
    assert chunks[-1]["choices"] == [] and all(c["usage"] is None for c in chunks[:-1])
    assembler_openai = openai_wire.StreamAssembler()
    for chunk in chunks:
        assembler_openai.feed(chunk)
    assert assembler_openai.response() == openai_wire.parse_completion(completion)
    without = _sse_data(b"".join(openai_chunks(completion, include_usage=False)))
    assert all("usage" not in c for c in without)
