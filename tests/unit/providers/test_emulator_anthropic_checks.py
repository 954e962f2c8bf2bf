"""What the emulated Anthropic API refuses: Messages params and batch creates, with the API's words."""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.emulator.anthropic_checks import STRICT_VERSION, check_batch, check_params
from nightshift.emulator.errors import ApiError

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA}


def use(call_id: str, name: str = "get_weather") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"city": "Paris"}}


def result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "sunny"}


def params(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    first = {"role": "user", "content": "weather?"}
    return {"model": "claude", "max_tokens": 100, "messages": [first, *messages], "tools": [TOOL], **fields}


def refused(body: Any) -> str:
    with pytest.raises(ApiError) as caught:
        check_params(body, version=STRICT_VERSION)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value.message


def test_a_well_formed_exchange_passes() -> None:
    body = params(
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, use("toolu_01A")]},
        {"role": "user", "content": [result("toolu_01A"), {"type": "text", "text": "thanks"}]},
        system=[{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    assert check_params(body, version=STRICT_VERSION) is body


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        ({**TOOL, "name": "get.weather"}, "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"),
        ({**TOOL, "name": "n" * 129}, "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"),
        ({**TOOL, "input_schema": {"type": "array"}}, "tools.0.custom.input_schema.type: Input should be 'object'"),
        ({"name": "get_weather"}, "tools.0.custom.input_schema: Field required"),
        (
            {**TOOL, "input_schema": {"type": "object", "properties": {"city": {"type": "string", "required": True}}}},
            "tools.0.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12",
        ),
        ({**TOOL, "parameters": SCHEMA}, "tools.0.custom.parameters: Extra inputs are not permitted"),
    ],
    ids=["name pattern", "name length", "not an object", "no schema", "invalid schema", "extra field"],
)
def test_tools(tool: dict[str, Any], message: str) -> None:
    assert refused({**params(), "tools": [tool]}).startswith(message)


def test_server_tools_are_not_custom_tools() -> None:
    body = {**params(), "tools": [TOOL, {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]}
    assert check_params(body, version=STRICT_VERSION) is body


def test_unknown_fields() -> None:
    assert refused(params(context={})) == "context: Extra inputs are not permitted"
    assert refused(params({"role": "assistant", "content": "x", "name": "Sam"})) == (
        "messages.1.name: Extra inputs are not permitted"
    )
    assert refused(params({"role": "assistant", "content": [{**use("t1"), "extra": 1}]})) == (
        "messages.1.content.0.tool_use.extra: Extra inputs are not permitted"
    )


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            [{"role": "assistant", "content": [use("call.1")]}, {"role": "user", "content": [result("call.1")]}],
            "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        (
            [{"role": "assistant", "content": [use("t1")]}, {"role": "user", "content": [result("t|1")]}],
            "messages.2.content.0.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        (
            [{"role": "assistant", "content": [use("t1", name="get weather")]}],
            "messages.1.content.0.tool_use.name: String should match pattern",
        ),
        (
            [{"role": "assistant", "content": [{**use("t1"), "input": "Paris"}]}],
            "messages.1.content.0.tool_use.input: Input should be a valid dictionary",
        ),
    ],
    ids=["tool_use id", "tool_use_id", "tool_use name", "tool_use input"],
)
def test_blocks(messages: list[dict[str, Any]], message: str) -> None:
    assert refused(params(*messages)).startswith(message)


def test_every_tool_use_is_answered_first_thing_in_the_next_user_turn() -> None:
    none = refused(params({"role": "assistant", "content": [use("t1")]}, {"role": "user", "content": "well?"}))
    after_text = refused(
        params(
            {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": [{"type": "text", "text": "here"}, result("t1")]},
        )
    )
    trailing = refused(params({"role": "assistant", "content": [use("t1"), use("t2")]}))

    assert none == (
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: t1. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )
    assert after_text.startswith("messages.2: `tool_use` ids were found without `tool_result` blocks")
    assert "immediately after: t1, t2." in trailing


def test_results_answer_the_turn_before_and_split_messages_of_one_role_count_as_one() -> None:
    stray = refused(params({"role": "user", "content": [result("t9")]}))
    split = params(
        {"role": "assistant", "content": [use("t1")]},
        {"role": "assistant", "content": [use("t2")]},
        {"role": "user", "content": [result("t1")]},
        {"role": "user", "content": [result("t2")]},
    )

    assert stray == (
        "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: t9. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
    )
    assert check_params(split, version=STRICT_VERSION) is split


def test_tool_use_ids_are_unique() -> None:
    message = refused(
        params(
            {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": [result("t1")]},
            {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": [result("t1")]},
        )
    )
    assert message == "messages.3.content.0: `tool_use` ids must be unique"


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        (
            [{"custom_id": "a.1", "params": {}}],
            "requests.0.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
        ),
        ([{"custom_id": "a\n", "params": {}}], "requests.0.custom_id: String should match pattern"),
        ([{"custom_id": "a", "params": {}}, {"custom_id": "a", "params": {}}], "requests.1.custom_id: Duplicate"),
    ],
)
def test_batch_creates(requests: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ApiError) as caught:
        check_batch({"requests": requests})
    assert caught.value.status == 400 and caught.value.message.startswith(message)


def test_a_batch_with_bad_params_is_accepted_its_requests_are_checked_later() -> None:
    assert check_batch({"requests": [{"custom_id": "a", "params": {"nonsense": True}}]}) == [("a", {"nonsense": True})]


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.mark.parametrize(
    "source",
    [{"type": "base64", "media_type": "image/png", "data": PNG}, {"type": "url", "url": "https://example.com/a.png"}],
    ids=["base64", "url"],
)
def test_image_blocks_pass(source: dict[str, Any]) -> None:
    body = params(
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": [{"type": "image", "source": source}]}
    )
    assert check_params(body, version=STRICT_VERSION) is body


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"type": "base64", "media_type": "image/bmp", "data": PNG}, "base64.media_type: Input should be 'image/jpeg'"),
        ({"type": "base64", "media_type": "image/png", "data": "not base64!"}, "not valid base64"),
        ({"type": "base64", "media_type": "image/png"}, "base64.data: Field required"),
        ({"type": "file", "file_id": "f"}, "expected tags: 'base64', 'url'"),
        ({"type": "url", "url": "https://x", "detail": "high"}, "url.detail: Extra inputs are not permitted"),
    ],
    ids=["media type", "bad data", "no data", "unknown source", "extra field"],
)
def test_bad_image_blocks_are_refused(source: dict[str, Any], message: str) -> None:
    body = params(
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": [{"type": "image", "source": source}]}
    )
    assert message in refused(body)
