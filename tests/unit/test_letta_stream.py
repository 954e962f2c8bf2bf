"""Letta's token pieces from a streamed answer (``api.letta_stream``): pure, no server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from nightshift.api.letta_messages import to_letta_messages
from nightshift.api.letta_stream import LettaStream, arguments_so_far, sse_events
from nightshift.api.partial_json import partial_object
from nightshift.clock import SYSTEM_CLOCK
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.domain.usage import Usage
from nightshift.errors import ProviderError, ProviderErrorKind
from nightshift.providers.agent_arguments import split_agent_arguments
from nightshift.providers.base import TextDelta, ToolCallDelta
from nightshift.runtime.step import TurnReason
from nightshift.runtime.sync import SyncResult
from support.messages import msg


@pytest.mark.parametrize(
    ("text", "members", "open_member"),
    [
        ("", {}, None),
        ('{"a', {}, None),
        ('{"a": "x\\"y', {}, ("a", 'x"y')),
        ('{"a": "x\\', {}, ("a", "x")),
        ('{"a": "\\u00e9\\u00', {}, ("a", "é")),
        ('{"a": "\\ud83d\\ude00!', {}, ("a", "😀!")),
        ('{"a": "\\ud83d\\ude', {}, ("a", "")),
        ('{"a": 12', {}, None),
        ('{"a": 12, "b": tr', {"a": 12}, None),
        ('{"a": true, "b": [1, {"c": "d"}], "e": "', {"a": True, "b": [1, {"c": "d"}]}, ("e", "")),
        ('{"a": 1}', {"a": 1}, None),
    ],
)
def test_partial_object(text: str, members: dict[str, Any], open_member: tuple[str, str] | None) -> None:
    assert partial_object(text) == (members, open_member)


ARGUMENTS = {"inner_thoughts": 'Ask about "B-2" é😀.', "order_id": "B-2", "count": 12, "request_heartbeat": True}


def test_arguments_so_far_is_always_the_start_of_the_stored_arguments() -> None:
    text = json.dumps(ARGUMENTS)
    stored = split_agent_arguments(text).arguments
    for end in range(len(text) + 1):
        assert stored.startswith(arguments_so_far(*partial_object(text[:end]))), text[:end]


def assistant(*calls: ToolCall, reasoning: str | None = None, text: str = "") -> Message:
    return Message(
        id="m-answer",
        organization_id="o",
        agent_id="a",
        role=Role.ASSISTANT,
        text=text,
        reasoning=reasoning,
        tool_calls=calls,
        created_at=msg(Role.USER).created_at,
    )


async def chunks_of(stream: LettaStream) -> list[dict[str, Any]]:
    out = []
    while not stream.chunks.empty():
        out.append(stream.chunks.get_nowait())
    return out


def joined(chunks: list[dict[str, Any]], message_type: str, key: str) -> str:
    values = [c[key] for c in chunks if c["message_type"] == message_type]
    return "".join(v["arguments"] if isinstance(v, dict) else v for v in values)


@pytest.mark.parametrize("size", [1, 3, 1000])
async def test_tool_call_pieces_join_to_the_stored_message(size: int) -> None:
    text = json.dumps(ARGUMENTS)
    split = split_agent_arguments(text)
    stream = LettaStream("a", tokens=True, clock=SYSTEM_CLOCK)
    await stream.delta("m-answer", ToolCallDelta(index=0, id="toolu_1", name="lookup_order"))
    for start in range(0, len(text), size):
        await stream.delta("m-answer", ToolCallDelta(index=0, arguments=text[start : start + size]))
    streamed = await chunks_of(stream)
    call = ToolCall(id="toolu_1", name="lookup_order", arguments=split.arguments)
    await stream.messages([assistant(call, reasoning=split.inner_thoughts)])
    everything = streamed + await chunks_of(stream)

    kinds = [c["message_type"] for c in everything]
    assert kinds.index("reasoning_message") < kinds.index("tool_call_message")
    assert all(c["id"] == "m-answer" for c in everything)
    assert joined(everything, "reasoning_message", "reasoning") == ARGUMENTS["inner_thoughts"]
    assert joined(everything, "tool_call_message", "tool_call") == split.arguments
    first_call = next(c for c in everything if c["message_type"] == "tool_call_message")
    assert first_call["tool_call"]["name"] == "lookup_order" and first_call["tool_call"]["tool_call_id"] == "toolu_1"
    if size == 1:
        # Pieces went out as the model wrote (only the number at the end waited for the step).
        assert len([c for c in streamed if c["message_type"] == "reasoning_message"]) > 5


async def test_send_message_pieces_are_the_assistant_message() -> None:
    text = json.dumps({"inner_thoughts": "Answer.", "message": "Your order shipped.", "request_heartbeat": False})
    stream = LettaStream("a", tokens=True, clock=SYSTEM_CLOCK)
    await stream.delta("m-answer", ToolCallDelta(index=0, id="toolu_2", name="send_message"))
    for start in range(0, len(text), 4):
        await stream.delta("m-answer", ToolCallDelta(index=0, arguments=text[start : start + 4]))
    call = ToolCall(id="toolu_2", name="send_message", arguments=split_agent_arguments(text).arguments)
    await stream.messages([assistant(call, reasoning="Answer."), msg(Role.TOOL, "{}", tool_call_id="toolu_2")])
    everything = await chunks_of(stream)

    assert {c["message_type"] for c in everything[:-1]} == {"reasoning_message", "assistant_message"}
    assert joined(everything, "assistant_message", "content") == "Your order shipped."
    assert joined(everything, "reasoning_message", "reasoning") == "Answer."
    assert everything[-1] == to_letta_messages(msg(Role.TOOL, "{}", tool_call_id="toolu_2"))[0]


async def test_text_pieces_and_unstreamed_calls() -> None:
    stream = LettaStream("a", tokens=True, clock=SYSTEM_CLOCK)
    await stream.delta("m-answer", TextDelta(text="Hel"))
    await stream.delta("m-answer", TextDelta(text="lo"))
    # A call the pieces never showed comes whole once stored.
    await stream.messages([assistant(ToolCall(id="c1", name="roll", arguments='{"sides": 6}'), text="Hello")])
    everything = await chunks_of(stream)

    assert joined(everything, "assistant_message", "content") == "Hello"
    calls = [c["tool_call"] for c in everything if c["message_type"] == "tool_call_message"]
    assert calls == [{"name": "roll", "arguments": '{"sides": 6}', "tool_call_id": "c1"}]


async def test_without_tokens_every_message_goes_whole() -> None:
    stream = LettaStream("a", tokens=False, clock=SYSTEM_CLOCK)
    message = assistant(ToolCall(id="c1", name="roll", arguments="{}"), reasoning="Roll.")
    await stream.messages([message])

    assert await chunks_of(stream) == to_letta_messages(message)


async def collect(events: Any) -> list[str]:
    return [event async for event in events]


async def test_events_ping_while_the_run_is_quiet_then_end() -> None:
    stream = LettaStream("a", tokens=False, clock=SYSTEM_CLOCK)
    go_on = asyncio.Event()

    async def run() -> SyncResult:
        await go_on.wait()
        await stream.messages([msg(Role.TOOL, "{}", tool_call_id="c1")])
        return SyncResult(stop=TurnReason.MAX_STEPS, usage=Usage(input_tokens=5, output_tokens=2), steps=3)

    task = asyncio.create_task(run())
    events = sse_events(
        stream, task, {"message_type": "user_message"}, ping_every=0.001, run_id="run-1", clock=SYSTEM_CLOCK
    )
    first, second = await anext(events), await anext(events)
    assert json.loads(first.removeprefix("data: ")) == {"message_type": "user_message", "run_id": "run-1", "seq_id": 1}
    pinged = json.loads(second.removeprefix("data: "))
    assert pinged["message_type"] == "ping" and pinged["id"] and pinged["date"]
    assert "seq_id" not in pinged, "a ping is not part of the run's stream"
    go_on.set()
    rest = [e for e in await collect(events) if "ping" not in e]

    assert [json.loads(e.removeprefix("data: "))["message_type"] for e in rest[:-1]] == [
        "tool_return_message",
        "stop_reason",
        "usage_statistics",
    ]
    assert json.loads(rest[1].removeprefix("data: "))["stop_reason"] == "max_steps"
    # Every chunk but the pings is numbered on from the first, the end too.
    assert [json.loads(e.removeprefix("data: "))["seq_id"] for e in rest[:-1]] == [2, 3, 4]
    assert {json.loads(e.removeprefix("data: "))["run_id"] for e in rest[:-1]} == {"run-1"}
    usage = json.loads(rest[2].removeprefix("data: "))
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["step_count"]) == (5, 2, 3)
    assert rest[-1] == "data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("error", "stop", "kind", "text"),
    [
        (
            ProviderError("Anthropic returned 529 overloaded_error: Overloaded", kind=ProviderErrorKind.OVERLOADED),
            "llm_api_error",
            "llm_api_error",
            "Overloaded",
        ),
        (RuntimeError("secret internals"), "error", "internal_error", "An error occurred during agent execution."),
    ],
)
async def test_events_after_an_error(error: Exception, stop: str, kind: str, text: str) -> None:
    async def run() -> SyncResult:
        raise error

    task = asyncio.create_task(run())
    stream = LettaStream("a", tokens=False, clock=SYSTEM_CLOCK)
    events = await collect(sse_events(stream, task, None, ping_every=None, run_id="run-1", clock=SYSTEM_CLOCK))

    stopped = json.loads(events[0].removeprefix("data: "))
    assert stopped == {"message_type": "stop_reason", "stop_reason": stop, "run_id": "run-1", "seq_id": 1}
    name, data = events[1].split("\n", 1)
    assert name == "event: error"
    payload = json.loads(data.removeprefix("data: "))
    assert payload["message_type"] == "error_message" and payload["error_type"] == kind
    assert (payload["run_id"], payload["seq_id"]) == ("run-1", 2)
    assert text in payload["message"] and "secret" not in events[1]
    assert events[2] == "data: [DONE]\n\n"


async def test_several_calls_of_one_answer() -> None:
    first = json.dumps({"inner_thoughts": "Both.", "order_id": "A", "request_heartbeat": True})
    second = json.dumps({"inner_thoughts": "Then B.", "order_id": "B", "request_heartbeat": True})
    stream = LettaStream("a", tokens=True, clock=SYSTEM_CLOCK)
    await stream.delta("m-answer", ToolCallDelta(index=0, id="c1", name="lookup_order"))
    await stream.delta("m-answer", ToolCallDelta(index=1, id="c2", name="lookup_order"))
    for start in range(0, max(len(first), len(second)), 5):  # the two calls' pieces interleaved
        await stream.delta("m-answer", ToolCallDelta(index=0, arguments=first[start : start + 5]))
        await stream.delta("m-answer", ToolCallDelta(index=1, arguments=second[start : start + 5]))
    splits = [split_agent_arguments(first), split_agent_arguments(second)]
    calls = [ToolCall(id=f"c{i + 1}", name="lookup_order", arguments=s.arguments) for i, s in enumerate(splits)]
    await stream.messages([assistant(*calls, reasoning="Both.\nThen B.")])
    everything = await chunks_of(stream)

    assert joined(everything, "reasoning_message", "reasoning") == "Both.\nThen B."
    for call in calls:
        pieces = [c for c in everything if c.get("tool_call", {}).get("tool_call_id") == call.id]
        assert len(pieces) > 1
        assert "".join(p["tool_call"]["arguments"] for p in pieces) == call.arguments
