"""letta-client 1.7.0 ``agents.messages.stream`` against a real server, both providers through the emulator."""

from __future__ import annotations

import json
import time
from itertools import islice
from typing import Any

import httpx
import letta_client
import pytest
from letta_client import Letta
from letta_client.types.agents import (
    AssistantMessage,
    ReasoningMessage,
    ToolCallMessage,
    UserMessage,
)
from letta_client.types.agents.letta_streaming_response import LettaStopReason, LettaUsageStatistics
from letta_client.types.tool_return_message import ToolReturnMessage

from nightshift.emulator.config import ScriptedError, ScriptedReply, ScriptedToolCall
from support.runs import LOOKUP_TOOL

MESSAGE_TYPES = (UserMessage, ReasoningMessage, ToolCallMessage, ToolReturnMessage, AssistantMessage)
MODELS = {"anthropic": "anthropic/claude-3-5-haiku-20241022", "openai": "openai/gpt-4o-mini"}
ASK = "Please use lookup_order for B-2"
# What one run of ASK writes: the user message, a lookup (reasoning, call, return), the heartbeat,
# and the answer (reasoning, send_message as the assistant's words, its return).
STEP_KINDS = [
    "user_message",
    "reasoning_message",
    "tool_call_message",
    "tool_return_message",
    "user_message",
    "reasoning_message",
    "assistant_message",
    "tool_return_message",
]


@pytest.fixture(params=sorted(MODELS))
def agent_id(request: pytest.FixtureRequest, letta: Letta) -> str:
    tool = letta.tools.create(source_code=LOOKUP_TOOL)
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name=f"clerk-{request.param}",
        model=MODELS[request.param],
        tool_ids=[tool.id],
        memory_blocks=[{"label": "human", "value": "?"}],
    )
    return agent.id


def stored(letta: Letta, agent_id: str, count: int) -> list[dict[str, Any]]:
    """The agent's last ``count`` messages as the listing shows them, oldest first."""
    listed = list(islice(letta.agents.messages.list(agent_id, order="asc", limit=100), 1000))
    return [m.model_dump(mode="json", exclude_none=True) for m in listed[-count:]]


def test_stream_sends_each_message_as_its_step_completes(letta: Letta, agent_id: str) -> None:
    # Letta's documented call (the client marks it deprecated in favour of create(streaming=True)).
    with (
        pytest.warns(DeprecationWarning),
        letta.agents.messages.stream(agent_id, messages=[{"role": "user", "content": ASK}]) as stream,
    ):
        chunks = list(stream)

    *messages, stop, usage = chunks
    assert [m.message_type for m in messages] == STEP_KINDS
    assert isinstance(messages[0], UserMessage) and messages[0].content == ASK
    assert isinstance(messages[2], ToolCallMessage) and messages[2].tool_call.name == "lookup_order"
    assert isinstance(messages[3], ToolReturnMessage) and "order B-2 shipped" in str(messages[3].tool_return)
    assert isinstance(messages[6], AssistantMessage) and "B-2" in str(messages[6].content)
    assert isinstance(stop, LettaStopReason) and stop.stop_reason == "end_turn"
    assert isinstance(usage, LettaUsageStatistics) and usage.step_count == 2
    assert usage.prompt_tokens and usage.completion_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    # Each chunk is numbered in the run's stream, from 1, the stop reason and the usage too.
    assert [getattr(m, "seq_id", None) for m in messages] == list(range(1, len(messages) + 1))
    assert [stop.model_extra, usage.model_extra] == [
        {"run_id": messages[0].run_id, "seq_id": len(messages) + 1},
        {"run_id": messages[0].run_id, "seq_id": len(messages) + 2},
    ]
    # The same messages, ids and all, as the agent's listing shows them once stored (where a
    # message has no place in a stream).
    sent = [m.model_dump(mode="json", exclude_none=True, exclude={"seq_id"}) for m in messages]
    listed = stored(letta, agent_id, len(sent))
    assert [(m["id"], m["message_type"]) for m in sent] == [(m["id"], m["message_type"]) for m in listed]
    assert sent == listed


def test_stream_tokens_sends_the_answer_in_pieces(letta: Letta, agent_id: str) -> None:
    with letta.agents.messages.create(agent_id, input=ASK, streaming=True, stream_tokens=True) as stream:
        chunks = list(stream)

    *messages, stop, usage = chunks
    assert isinstance(stop, LettaStopReason) and stop.stop_reason == "end_turn"
    assert isinstance(usage, LettaUsageStatistics) and usage.step_count == 2
    numbers = [getattr(m, "seq_id", None) for m in messages]
    assert numbers == list(range(1, len(messages) + 1)), "each piece numbered in order"

    listed = stored(letta, agent_id, len(STEP_KINDS))
    # Pieces of one part share the stored message's id; joined, they are that part as stored.
    joined: dict[tuple[str, str], list[Any]] = {}
    for chunk in messages:
        assert isinstance(
            chunk, UserMessage | ReasoningMessage | ToolCallMessage | ToolReturnMessage | AssistantMessage
        )
        joined.setdefault((chunk.id, str(chunk.message_type)), []).append(chunk)
    assert list(joined) == [(m["id"], m["message_type"]) for m in listed]
    for part in listed:
        pieces = joined[(part["id"], part["message_type"])]
        if part["message_type"] == "reasoning_message":
            assert all(isinstance(p, ReasoningMessage) for p in pieces)
            assert len(pieces) > 1, "the reasoning comes as it is written"
            assert "".join(p.reasoning for p in pieces) == part["reasoning"]
        elif part["message_type"] == "assistant_message":
            assert len(pieces) > 1
            assert "".join(str(p.content) for p in pieces) == part["content"]
        elif part["message_type"] == "tool_call_message":
            assert len(pieces) > 1
            assert pieces[0].tool_call.name == "lookup_order"
            assert pieces[0].tool_call.tool_call_id == part["tool_call"]["tool_call_id"]
            arguments = "".join(p.tool_call.arguments or "" for p in pieces)
            assert arguments == part["tool_call"]["arguments"]
            assert json.loads(arguments) == {"order_id": "B-2"}
        else:  # the input, the returns and the heartbeat come whole
            assert [p.model_dump(mode="json", exclude_none=True, exclude={"seq_id"}) for p in pieces] == [part]


def test_provider_error_mid_stream(letta: Letta, agent_id: str, emulator: str) -> None:
    call = ScriptedToolCall(name="lookup_order", arguments={"order_id": "C-3"}, request_heartbeat=True)
    lookup = ScriptedReply(tool_call=call)
    refused = ScriptedReply(error=ScriptedError(type="invalid_request_error", message="prompt is too long"))
    body = {"custom_id": "*", "replies": [r.model_dump(mode="json") for r in (lookup, refused)]}
    httpx.post(f"{emulator}/_emulator/script", json=body).raise_for_status()

    received: list[Any] = []
    with (
        pytest.raises(letta_client.APIStatusError) as caught,
        letta.agents.messages.create(
            agent_id, input="Please use lookup_order for C-3", streaming=True, stream_tokens=True
        ) as stream,
    ):
        received.extend(stream)

    error = caught.value.body
    assert isinstance(error, dict) and error["message_type"] == "error_message"
    assert error["error_type"] == "llm_api_error" and "prompt is too long" in error["message"]
    assert received[-1].message_type == "stop_reason" and received[-1].stop_reason == "llm_api_error"
    kinds = {m.message_type for m in received}
    assert {"user_message", "reasoning_message", "tool_call_message", "tool_return_message"} <= kinds

    # What the first step wrote stays written, and the agent is free for the next send.
    listed = stored(letta, agent_id, 5)
    assert [m["message_type"] for m in listed] == STEP_KINDS[:5]
    again = letta.agents.messages.create(agent_id, input="Please use lookup_order for D-4")
    assert again.stop_reason is not None and again.stop_reason.stop_reason == "end_turn"


def test_stream_framing_and_refusals(http: httpx.Client, agent_id: str) -> None:
    with http.stream("POST", f"/v1/agents/{agent_id}/messages/stream", json={"input": ASK}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = "".join(response.iter_text()).split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(e.startswith("data: {") for e in events[:-2])
    assert json.loads(events[-3].removeprefix("data: "))["message_type"] == "usage_statistics"

    # Refused before the stream begins, with the status the non-streaming send gives.
    unknown = "agent-00000000-0000-4000-8000-000000000000"
    missing = http.post(f"/v1/agents/{unknown}/messages/stream", json={"input": "hi"})
    assert missing.status_code == 404 and "not found" in missing.json()["detail"]
    empty = http.post(f"/v1/agents/{agent_id}/messages/stream", json={"input": "  "})
    assert empty.status_code == 422
    steps = http.post(f"/v1/agents/{agent_id}/messages/stream", json={"input": "hi", "max_steps": 0})
    assert steps.status_code == 422


def test_a_client_that_leaves_does_not_stop_the_run(http: httpx.Client, letta: Letta, agent_id: str) -> None:
    with http.stream("POST", f"/v1/agents/{agent_id}/messages/stream", json={"input": ASK}) as response:
        first = next(response.iter_lines())
        assert json.loads(first.removeprefix("data: "))["message_type"] == "user_message"
    # Gone after the first event: the run goes on and is stored whole; the agent is free again after.
    deadline = time.monotonic() + 60
    while [m["message_type"] for m in stored(letta, agent_id, len(STEP_KINDS))] != STEP_KINDS:
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.05)
    while True:
        again = http.post(f"/v1/agents/{agent_id}/messages", json={"input": "hi"})
        if again.status_code != 409:  # the run's hold is released just after its last write
            break
        assert time.monotonic() < deadline, "the agent stayed held"
        time.sleep(0.05)
    assert again.status_code == 200, again.text
