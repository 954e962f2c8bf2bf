"""OpenAI wire translation, both ways: chat bodies and batch lines built, responses parsed back."""

from __future__ import annotations

import json
from typing import Any

import orjson

from nightshift.domain.messages import Image, Message, Role, ToolCall
from nightshift.providers.base import MISSING_TOOL_RESULT, BatchState, ModelRequest, OutcomeStatus
from nightshift.providers.openai import wire
from support.messages import NOW, msg

SEND = {
    "name": "send_message",
    "description": "Send a message.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
}


def request(*messages: Message, **fields: Any) -> ModelRequest:
    return ModelRequest(model="gpt-4o-mini", system="You are Sam.", messages=messages, tools=(SEND,), **fields)


def test_body_has_system_first_tools_and_forced_single_call() -> None:
    body = wire.build_request(request(msg(Role.USER, "hi"), temperature=0.2, max_tokens=100))

    assert body["messages"] == [
        {"role": "system", "content": "You are Sam."},
        {"role": "user", "content": "hi"},
    ]
    assert body["tool_choice"] == "required"
    assert body["parallel_tool_calls"] is False
    assert body["temperature"] == 0.2
    assert body["max_completion_tokens"] == 100
    function = body["tools"][0]["function"]
    assert body["tools"][0]["type"] == "function"
    assert list(function["parameters"]["properties"]) == ["inner_thoughts", "message", "request_heartbeat"]
    assert function["parameters"]["required"] == ["inner_thoughts", "message", "request_heartbeat"]


def test_forced_tool_and_optional_call() -> None:
    forced = wire.build_request(request(msg(Role.USER, "hi"), forced_tool="send_message"))
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "send_message"}}
    free = wire.build_request(request(msg(Role.USER, "hi"), require_tool_call=False))
    assert free["tool_choice"] == "auto"
    assert "temperature" not in free


def test_assistant_tool_calls_and_tool_role() -> None:
    call = ToolCall(id="call_1", name="send_message", arguments='{"message": "Hi"}')
    messages = wire.to_messages(
        [
            msg(Role.USER, "hello"),
            msg(Role.ASSISTANT, reasoning="Greet back.", tool_calls=(call,)),
            msg(Role.TOOL, "Sent.", tool_call_id="call_1"),
        ]
    )

    assert messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "send_message",
                    "arguments": json.dumps({"inner_thoughts": "Greet back.", "message": "Hi"}),
                },
            }
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "Sent."}


def test_orphan_result_becomes_user_text_and_open_call_is_answered() -> None:
    call = ToolCall(id="call_1", name="send_message", arguments="{}")
    messages = wire.to_messages(
        [msg(Role.TOOL, "stale", tool_call_id="gone"), msg(Role.ASSISTANT, tool_calls=(call,)), msg(Role.USER, "hi")]
    )

    assert messages[0] == {"role": "user", "content": "Tool result: stale"}
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": MISSING_TOOL_RESULT}
    assert messages[3] == {"role": "user", "content": "hi"}


def test_open_calls_are_answered_before_an_orphan_result() -> None:
    call = ToolCall(id="call_1", name="send_message", arguments="{}")
    messages = wire.to_messages([msg(Role.ASSISTANT, tool_calls=(call,)), msg(Role.TOOL, "x", tool_call_id="other")])

    assert [m["role"] for m in messages] == ["assistant", "tool", "user"]


def test_malformed_past_arguments_are_sent_verbatim() -> None:
    call = ToolCall(id="call_1", name="send_message", arguments="{oops")
    messages = wire.to_messages([msg(Role.ASSISTANT, tool_calls=(call,)), msg(Role.TOOL, "x", tool_call_id="call_1")])

    assert messages[0]["tool_calls"][0]["function"]["arguments"] == "{oops"


def test_a_too_long_stored_id_is_the_same_short_id_in_the_call_and_its_result() -> None:
    old_greeting = "call-0192f0c4-1a2b-7c3d-8e4f-a5b6c7d8e9f0"  # 41 characters, refused by OpenAI
    call = ToolCall(id=old_greeting, name="send_message", arguments='{"message": "Hi"}')
    messages = wire.to_messages(
        [
            msg(Role.ASSISTANT, tool_calls=(call,)),
            msg(Role.TOOL, "Sent.", tool_call_id=old_greeting),
            msg(Role.ASSISTANT, tool_calls=(call,)),  # a call left without a result gets one too
        ]
    )

    sent = messages[0]["tool_calls"][0]["id"]
    assert len(sent) <= 40 and sent != old_greeting
    assert messages[1] == {"role": "tool", "tool_call_id": sent, "content": "Sent."}
    assert messages[2]["tool_calls"][0]["id"] == sent
    assert messages[3] == {"role": "tool", "tool_call_id": sent, "content": MISSING_TOOL_RESULT}


def test_an_anthropic_id_is_replayed_to_openai_as_it_is() -> None:
    call = ToolCall(id="toolu_01AbmHJypDhKqBF7NKdRPJ6d", name="send_message", arguments="{}")
    messages = wire.to_messages([msg(Role.ASSISTANT, tool_calls=(call,)), msg(Role.TOOL, "x", tool_call_id=call.id)])

    assert messages[0]["tool_calls"][0]["id"] == messages[1]["tool_call_id"] == call.id


def test_a_description_over_1024_characters_is_cut() -> None:
    long = {**SEND, "description": "d" * 1500}
    body = wire.build_request(ModelRequest(model="gpt-4o-mini", system="S", messages=(), tools=(long, SEND)))

    assert body["tools"][0]["function"]["description"] == "d" * 1024
    assert body["tools"][1]["function"]["description"] == "Send a message."


def test_batch_line_targets_chat_completions() -> None:
    line = orjson.loads(wire.batch_entry("agent-1", request(msg(Role.USER, "hi"))))

    assert line["custom_id"] == "agent-1"
    assert line["method"] == "POST"
    assert line["url"] == "/v1/chat/completions"
    assert line["body"]["model"] == "gpt-4o-mini"


def completion(arguments: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "send_message", "arguments": arguments},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 100}},
    }


def test_response_is_stripped_and_usage_split() -> None:
    arguments = json.dumps({"inner_thoughts": "Reply.", "message": "Hi!", "request_heartbeat": "true"})
    response = wire.parse_completion(completion(arguments))

    assert response.tool_call == ToolCall(id="call_9", name="send_message", arguments='{"message": "Hi!"}')
    assert response.reasoning == "Reply."
    assert response.request_heartbeat is True
    assert response.stop_reason == "tool_calls"
    assert (response.usage.input_tokens, response.usage.cache_read_tokens) == (20, 100)
    assert response.usage.output_tokens == 7


def test_malformed_arguments_do_not_raise_and_are_kept() -> None:
    response = wire.parse_completion(completion('{"message": "Hi'))

    assert response.tool_call is not None
    assert response.tool_call.arguments == '{"message": "Hi'
    assert response.reasoning is None and response.request_heartbeat is False
    arrays = wire.parse_completion(completion("[1, 2]"))
    assert arrays.tool_call is not None and arrays.tool_call.arguments == "[1, 2]"


def test_text_only_answer() -> None:
    body = completion("{}")
    body["choices"][0]["message"] = {"role": "assistant", "content": "Plain answer."}
    response = wire.parse_completion(body)

    assert response.tool_call is None
    assert response.text == "Plain answer."


def test_result_lines() -> None:
    ok = wire.parse_result_line(
        {"custom_id": "a", "response": {"status_code": 200, "body": completion("{}")}, "error": None}
    )
    refused = wire.parse_result_line(
        {
            "custom_id": "b",
            "response": {"status_code": 429, "body": {"error": {"message": "slow down", "type": "requests"}}},
            "error": None,
        }
    )
    expired = wire.parse_result_line({"custom_id": "c", "response": None, "error": {"code": "batch_expired"}})
    cancelled = wire.parse_result_line({"custom_id": "d", "response": None, "error": {"code": "batch_cancelled"}})

    assert ok[1].status is OutcomeStatus.SUCCEEDED
    assert refused[1].status is OutcomeStatus.ERRORED and refused[1].error is not None
    assert (refused[1].error.type, refused[1].error.message) == ("rate_limit_error", "slow down")
    assert expired[1].status is OutcomeStatus.EXPIRED
    assert cancelled[1].status is OutcomeStatus.CANCELED


def batch(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": "batch_1",
        "object": "batch",
        "status": status,
        "created_at": 1735689600,
        "expires_at": 1735776000,
        "request_counts": {"total": 10, "completed": 6, "failed": 1},
        **fields,
    }


def test_batch_status_counts() -> None:
    running = wire.parse_batch(batch("in_progress"))
    assert running.state is BatchState.IN_PROGRESS
    assert (running.counts.processing, running.counts.succeeded, running.counts.errored) == (3, 6, 1)
    assert running.created_at == NOW

    expired = wire.parse_batch(batch("expired", expired_at=1735693200))
    assert expired.state is BatchState.ENDED and expired.counts.expired == 3
    assert expired.ended_at is not None

    cancelling = wire.parse_batch(batch("cancelling"))
    assert cancelling.state is BatchState.CANCELING
    assert wire.parse_batch(batch("cancelled")).counts.canceled == 3
    assert wire.parse_batch(batch("finalizing")).state is BatchState.IN_PROGRESS


def test_failed_batch_reports_its_errors() -> None:
    failed = wire.parse_batch(
        batch(
            "failed",
            request_counts={"total": 0, "completed": 0, "failed": 0},
            errors={"data": [{"code": "duplicate_custom_id", "message": "dup", "line": 2}]},
        )
    )

    assert failed.state is BatchState.ENDED
    assert failed.error == "line 2: dup"
    outcome = wire.missing_outcome(failed)
    assert outcome.status is OutcomeStatus.ERRORED
    assert outcome.error is not None and outcome.error.type == "invalid_request_error"


# Several tool calls in one turn.

CALLS = tuple(
    ToolCall(id=f"call_{i}", name="send_message", arguments=json.dumps({"message": m}))
    for i, m in enumerate(("one", "two", "three"), 1)
)


def test_parallel_calls_are_allowed_when_the_request_says_so() -> None:
    assert wire.build_request(request(msg(Role.USER, "hi"), parallel_tool_calls=True))["parallel_tool_calls"] is True


def test_a_turn_of_three_calls_is_one_assistant_message_answered_by_a_tool_message_each() -> None:
    messages = wire.to_messages(
        [
            msg(Role.USER, "say three things"),
            msg(Role.ASSISTANT, reasoning="Three.", tool_calls=CALLS),
            msg(Role.TOOL, "sent", tool_call_id="call_1", name="send_message"),
            msg(Role.TOOL, "failed", tool_call_id="call_2", name="send_message", is_error=True),
            msg(Role.TOOL, "sent", tool_call_id="call_3", name="send_message"),
        ]
    )

    assert [json.loads(c["function"]["arguments"]) for c in messages[1]["tool_calls"]] == [
        {"inner_thoughts": "Three.", "message": "one"},  # the reasoning once, in the first call
        {"message": "two"},
        {"message": "three"},
    ]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "sent"},
        {"role": "tool", "tool_call_id": "call_2", "content": "failed"},
        {"role": "tool", "tool_call_id": "call_3", "content": "sent"},
    ]


def test_a_call_of_the_turn_left_without_a_result_is_answered_with_an_error() -> None:
    messages = wire.to_messages(
        [
            msg(Role.USER, "hi"),
            msg(Role.ASSISTANT, tool_calls=CALLS[:2]),
            msg(Role.TOOL, "sent", tool_call_id="call_2", name="send_message"),
            msg(Role.USER, "next"),
        ]
    )

    assert [m.get("tool_call_id") for m in messages[2:4]] == ["call_2", "call_1"]
    assert messages[3]["content"] == MISSING_TOOL_RESULT


def test_every_tool_call_of_an_answer_is_kept_and_any_heartbeat_counts() -> None:
    body = completion("{}")
    body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "send_message", "arguments": json.dumps(arguments)},
        }
        for i, arguments in enumerate(
            (
                {"inner_thoughts": "First.", "message": "a", "request_heartbeat": False},
                {"message": "b", "request_heartbeat": True},
                {"inner_thoughts": "Third.", "message": "c"},
            )
        )
    ]
    response = wire.parse_completion(body)

    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_0", '{"message": "a"}'),
        ("call_1", '{"message": "b"}'),
        ("call_2", '{"message": "c"}'),
    ]
    assert response.reasoning == "First.\nThird."
    assert response.request_heartbeat is True


def test_a_users_images_follow_its_text_as_image_url_parts() -> None:
    images = (Image(media_type="image/png", data="iVBORw0KGgo="), Image(url="https://example.com/cat.jpg"))
    assert wire.to_messages([msg(Role.USER, "what are these?", images=images)]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what are these?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        }
    ]


def test_a_flex_request_asks_for_the_flex_tier_and_a_batch_line_never_does() -> None:
    assert wire.build_request(request(msg(Role.USER, "hi"), flex=True))["service_tier"] == "flex"
    assert "service_tier" not in wire.build_request(request(msg(Role.USER, "hi")))
    assert "service_tier" not in orjson.loads(wire.batch_entry("agent-1", request(msg(Role.USER, "hi"))))["body"]
