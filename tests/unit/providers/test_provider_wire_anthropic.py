"""Anthropic wire translation, both ways: requests built from our messages, responses parsed back."""

from __future__ import annotations

import json
import re
from typing import Any

from nightshift.domain.messages import Image, Message, Role, ToolCall
from nightshift.providers.anthropic import wire
from nightshift.providers.base import (
    FIRST_USER_TURN,
    MISSING_TOOL_RESULT,
    BatchState,
    CachePlan,
    CacheTtl,
    ModelRequest,
    OutcomeStatus,
)
from support.messages import NOW, msg

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SEND = {
    "name": "send_message",
    "description": "Send a message.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
}


def request(*messages: Message, **fields: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-3-5-haiku", system="You are Sam.", messages=messages, tools=(SEND, WEATHER), **fields
    )


def test_system_is_top_level_and_a_request_without_a_cache_plan_marks_nothing() -> None:
    params = wire.build_request(request(msg(Role.USER, "hi")))

    assert params["system"] == [{"type": "text", "text": "You are Sam."}]
    assert all("cache_control" not in t for t in params["tools"])
    assert params["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert params["max_tokens"] == 4096


def test_the_cache_plan_marks_the_last_tool_the_system_and_the_last_message() -> None:
    plan = CachePlan(tools=CacheTtl.ONE_HOUR, system=CacheTtl.ONE_HOUR, history=CacheTtl.FIVE_MINUTES)
    sent = request(msg(Role.USER, "hi"), msg(Role.ASSISTANT, "hello"), msg(Role.USER, "how are you?"), cache=plan)
    params = wire.build_request(sent)

    assert "cache_control" not in params["tools"][0]
    assert params["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert params["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert [b.get("cache_control") for m in params["messages"] for b in m["content"]] == [
        None,
        None,
        {"type": "ephemeral", "ttl": "5m"},
    ]


def test_a_plan_without_a_history_mark_leaves_the_messages_as_they_are() -> None:
    params = wire.build_request(request(msg(Role.USER, "hi"), cache=CachePlan(system=CacheTtl.FIVE_MINUTES)))

    assert params["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
    assert "cache_control" not in params["tools"][-1]
    assert params["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_temperature_is_never_sent() -> None:
    params = wire.build_request(request(msg(Role.USER, "hi"), temperature=0.7))

    assert "temperature" not in params


def test_tools_get_inner_thoughts_first_and_request_heartbeat_required() -> None:
    tool = wire.build_request(request(msg(Role.USER, "hi")))["tools"][1]

    schema = tool["input_schema"]
    assert list(schema["properties"]) == ["inner_thoughts", "city", "request_heartbeat"]
    assert schema["properties"]["inner_thoughts"]["type"] == "string"
    assert schema["properties"]["request_heartbeat"]["type"] == "boolean"
    assert schema["required"] == ["inner_thoughts", "city", "request_heartbeat"]
    assert tool["name"] == "get_weather"
    assert tool["description"] == "Weather for a city."


def test_tool_choice_forces_one_call() -> None:
    assert wire.build_request(request(msg(Role.USER, "hi")))["tool_choice"] == {
        "type": "any",
        "disable_parallel_tool_use": True,
    }
    forced = wire.build_request(request(msg(Role.USER, "hi"), forced_tool="get_weather"))
    assert forced["tool_choice"] == {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
    free = wire.build_request(request(msg(Role.USER, "hi"), require_tool_call=False))
    assert free["tool_choice"]["type"] == "auto"


def test_no_tools_means_no_tool_choice() -> None:
    params = wire.build_request(ModelRequest(model="m", system="", messages=(msg(Role.USER, "hi"),), max_tokens=10))

    assert "tools" not in params and "tool_choice" not in params and "system" not in params


def test_assistant_tool_call_carries_reasoning_and_result_follows() -> None:
    call = ToolCall(id="toolu_1", name="get_weather", arguments='{"city": "Paris"}')
    messages = wire.to_messages(
        [
            msg(Role.USER, "weather in Paris?"),
            msg(Role.ASSISTANT, reasoning="User wants weather.", tool_calls=(call,)),
            msg(Role.TOOL, "Sunny", tool_call_id="toolu_1", name="get_weather"),
            msg(Role.USER, '{"type": "heartbeat"}'),
        ]
    )

    assert messages[1] == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"inner_thoughts": "User wants weather.", "city": "Paris"},
            }
        ],
    }
    # The tool result and the heartbeat after it are merged into one user turn, result first.
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
            {"type": "text", "text": '{"type": "heartbeat"}'},
        ],
    }
    assert len(messages) == 3


def test_same_role_turns_are_merged() -> None:
    messages = wire.to_messages([msg(Role.USER, "one"), msg(Role.USER, "two")])

    assert messages == [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]


def test_history_starting_with_the_assistant_gets_a_first_user_turn() -> None:
    messages = wire.to_messages([msg(Role.ASSISTANT, "Hello!"), msg(Role.USER, "hi")])

    assert messages[0] == {"role": "user", "content": [{"type": "text", "text": FIRST_USER_TURN}]}
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]


def test_empty_history_gets_a_user_turn() -> None:
    assert wire.to_messages([])[0]["role"] == "user"


def test_error_result_is_marked() -> None:
    call = ToolCall(id="t1", name="get_weather", arguments="{}")
    messages = wire.to_messages(
        [
            msg(Role.USER, "go"),
            msg(Role.ASSISTANT, tool_calls=(call,)),
            msg(Role.TOOL, "boom", tool_call_id="t1", is_error=True),
        ]
    )

    assert messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": "boom",
        "is_error": True,
    }


def test_orphan_result_becomes_text_and_open_call_gets_an_error_result() -> None:
    call = ToolCall(id="t1", name="get_weather", arguments="{}")
    messages = wire.to_messages(
        [
            msg(Role.TOOL, "stale", tool_call_id="gone"),
            msg(Role.USER, "hi"),
            msg(Role.ASSISTANT, tool_calls=(call,)),
        ]
    )

    assert messages[0]["content"][0] == {"type": "text", "text": "Tool result: stale"}
    assert messages[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": MISSING_TOOL_RESULT, "is_error": True}
    ]


def test_an_id_anthropic_refuses_is_the_same_stand_in_in_the_call_and_its_result() -> None:
    stored = "call_abc|fc_def"  # shaped like another client's ids: '|' is outside ^[a-zA-Z0-9_-]+$
    call = ToolCall(id=stored, name="get_weather", arguments="{}")
    messages = wire.to_messages(
        [msg(Role.USER, "go"), msg(Role.ASSISTANT, tool_calls=(call,)), msg(Role.TOOL, "sunny", tool_call_id=stored)]
    )

    sent = messages[1]["content"][0]["id"]
    assert sent != stored and re.fullmatch(r"[a-zA-Z0-9_-]+", sent)
    assert messages[2]["content"][0] == {"type": "tool_result", "tool_use_id": sent, "content": "sunny"}


def test_openai_ids_and_the_old_greeting_id_are_replayed_to_anthropic_as_they_are() -> None:
    for stored in ("call_sS3HejVTEiGEJGwTW7bxHKh8", "call-0192f0c4-1a2b-7c3d-8e4f-a5b6c7d8e9f0"):
        call = ToolCall(id=stored, name="get_weather", arguments="{}")
        messages = wire.to_messages(
            [msg(Role.USER, "go"), msg(Role.ASSISTANT, tool_calls=(call,)), msg(Role.TOOL, "x", tool_call_id=stored)]
        )

        assert messages[1]["content"][0]["id"] == messages[2]["content"][0]["tool_use_id"] == stored


def test_malformed_past_arguments_are_kept_as_text() -> None:
    call = ToolCall(id="t1", name="get_weather", arguments="{not json")
    messages = wire.to_messages(
        [
            msg(Role.USER, "go"),
            msg(Role.ASSISTANT, reasoning="hm", tool_calls=(call,)),
            msg(Role.TOOL, "err", tool_call_id="t1"),
        ]
    )

    assert messages[1]["content"][0]["input"] == {"inner_thoughts": "hm", "arguments": "{not json"}


def test_assistant_reasoning_without_a_call_is_sent_as_text() -> None:
    messages = wire.to_messages([msg(Role.USER, "hi"), msg(Role.ASSISTANT, reasoning="thinking")])

    assert messages[1] == {"role": "assistant", "content": [{"type": "text", "text": "thinking"}]}


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-3-5-haiku",
    "content": [
        {
            "type": "tool_use",
            "id": "toolu_9",
            "name": "send_message",
            "input": {"inner_thoughts": "Say hi.", "message": "Hi!", "request_heartbeat": True},
        }
    ],
    "stop_reason": "tool_use",
    "usage": {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": None,
    },
}


def test_response_tool_call_is_stripped_of_agent_arguments() -> None:
    response = wire.parse_message(MESSAGE)

    assert response.tool_call == ToolCall(id="toolu_9", name="send_message", arguments='{"message": "Hi!"}')
    assert response.reasoning == "Say hi."
    assert response.request_heartbeat is True
    assert response.text is None
    assert response.stop_reason == "tool_use"
    assert response.usage.input_tokens == 10
    assert response.usage.output_tokens == 5
    assert response.usage.cache_write_tokens == 100
    assert response.usage.cache_read_tokens == 0


def test_cache_writes_are_split_by_lifetime_when_the_usage_says() -> None:
    usage = wire.parse_usage(
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 100,
            "cache_creation": {"ephemeral_5m_input_tokens": 30, "ephemeral_1h_input_tokens": 70},
        }
    )
    assert (usage.cache_write_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (100, 30, 70)
    # Without the split the writes stay unattributed (priced at the lifetime the request asked for).
    assert (
        wire.parse_message(MESSAGE).usage.cache_write_5m_tokens,
        wire.parse_message(MESSAGE).usage.cache_write_1h_tokens,
    ) == (0, 0)


def test_heartbeat_defaults_to_false_and_text_only_answers_are_kept() -> None:
    text_only = {**MESSAGE, "content": [{"type": "text", "text": "Just text."}], "stop_reason": "end_turn"}
    response = wire.parse_message(text_only)

    assert response.tool_call is None
    assert response.text == "Just text."
    assert response.request_heartbeat is False


def test_result_lines_map_to_outcomes() -> None:
    succeeded = wire.parse_result_line({"custom_id": "a", "result": {"type": "succeeded", "message": MESSAGE}})
    errored = wire.parse_result_line(
        {
            "custom_id": "b",
            "result": {
                "type": "errored",
                "error": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            },
        }
    )
    canceled = wire.parse_result_line({"custom_id": "c", "result": {"type": "canceled"}})
    expired = wire.parse_result_line({"custom_id": "d", "result": {"type": "expired"}})

    assert succeeded[0] == "a" and succeeded[1].status is OutcomeStatus.SUCCEEDED
    assert succeeded[1].response is not None and succeeded[1].response.tool_call is not None
    assert errored[1].status is OutcomeStatus.ERRORED
    assert errored[1].error is not None
    assert (errored[1].error.type, errored[1].error.message) == ("overloaded_error", "Overloaded")
    assert errored[1].error.retryable
    assert canceled[1].status is OutcomeStatus.CANCELED
    assert expired[1].status is OutcomeStatus.EXPIRED


def test_batch_object_maps_to_status() -> None:
    status = wire.parse_batch(
        {
            "id": "msgbatch_1",
            "type": "message_batch",
            "processing_status": "ended",
            "request_counts": {"processing": 0, "succeeded": 3, "errored": 1, "canceled": 0, "expired": 2},
            "created_at": "2025-01-01T00:00:00Z",
            "expires_at": "2025-01-02T00:00:00Z",
            "ended_at": "2025-01-01T01:00:00Z",
            "results_url": "/v1/messages/batches/msgbatch_1/results",
        }
    )

    assert status.state is BatchState.ENDED
    assert status.counts.total == 6 and status.counts.expired == 2
    assert status.created_at == NOW
    assert status.ended_at is not None and status.ended_at.hour == 1


def test_request_is_json_serialisable() -> None:
    json.dumps(wire.build_request(request(msg(Role.USER, "hi"))))


# Several tool calls in one turn.

CALLS = tuple(
    ToolCall(id=f"toolu_{i}", name="get_weather", arguments=json.dumps({"city": c}))
    for i, c in enumerate(("Paris", "Rome", "Oslo"), 1)
)


def test_parallel_calls_are_allowed_when_the_request_says_so() -> None:
    params = wire.build_request(request(msg(Role.USER, "hi"), parallel_tool_calls=True))

    assert params["tool_choice"] == {"type": "any", "disable_parallel_tool_use": False}


def test_a_turn_of_three_calls_is_one_assistant_turn_answered_by_one_user_turn() -> None:
    messages = wire.to_messages(
        [
            msg(Role.USER, "weather in Paris, Rome and Oslo?"),
            msg(Role.ASSISTANT, reasoning="Three cities.", tool_calls=CALLS),
            msg(Role.TOOL, "Sunny", tool_call_id="toolu_1", name="get_weather"),
            msg(Role.TOOL, "Timeout", tool_call_id="toolu_2", name="get_weather", is_error=True),
            msg(Role.TOOL, "Snow", tool_call_id="toolu_3", name="get_weather"),
            msg(Role.USER, '{"type": "heartbeat"}'),
        ]
    )

    assert [b["input"] for b in messages[1]["content"]] == [
        {"inner_thoughts": "Three cities.", "city": "Paris"},  # the reasoning once, in the first call
        {"city": "Rome"},
        {"city": "Oslo"},
    ]
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Timeout", "is_error": True},
            {"type": "tool_result", "tool_use_id": "toolu_3", "content": "Snow"},
            {"type": "text", "text": '{"type": "heartbeat"}'},
        ],
    }
    assert len(messages) == 3


def test_a_call_of_the_turn_left_without_a_result_gets_an_error_result() -> None:
    messages = wire.to_messages(
        [
            msg(Role.USER, "weather?"),
            msg(Role.ASSISTANT, tool_calls=CALLS[:2]),
            msg(Role.TOOL, "Sunny", tool_call_id="toolu_1", name="get_weather"),
        ]
    )

    assert [(b["tool_use_id"], b.get("is_error", False)) for b in messages[2]["content"]] == [
        ("toolu_1", False),
        ("toolu_2", True),
    ]


def test_every_tool_use_block_of_an_answer_is_a_call_and_any_heartbeat_counts() -> None:
    content = [
        {"type": "text", "text": "Looking these up."},
        {
            "type": "tool_use",
            "id": "toolu_a",
            "name": "get_weather",
            "input": {"inner_thoughts": "Paris first.", "city": "Paris", "request_heartbeat": False},
        },
        {
            "type": "tool_use",
            "id": "toolu_b",
            "name": "get_weather",
            "input": {"inner_thoughts": "Paris first.", "city": "Rome", "request_heartbeat": True},
        },
        {
            "type": "tool_use",
            "id": "toolu_c",
            "name": "send_message",
            "input": {"inner_thoughts": "Tell them.", "message": "On it"},
        },
    ]
    response = wire.parse_message({**MESSAGE, "content": content})

    assert response.tool_calls == (
        ToolCall(id="toolu_a", name="get_weather", arguments='{"city": "Paris"}'),
        ToolCall(id="toolu_b", name="get_weather", arguments='{"city": "Rome"}'),
        ToolCall(id="toolu_c", name="send_message", arguments='{"message": "On it"}'),
    )
    assert response.reasoning == "Paris first.\nTell them."
    assert response.request_heartbeat is True
    assert response.text == "Looking these up."


def test_a_users_images_follow_its_text_as_image_blocks() -> None:
    images = (Image(media_type="image/png", data="iVBORw0KGgo="), Image(url="https://example.com/cat.jpg"))
    assert wire.to_messages([msg(Role.USER, "what are these?", images=images)]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what are these?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            ],
        }
    ]
