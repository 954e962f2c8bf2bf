"""What the emulated OpenAI API refuses: chat bodies and batch input files, with the API's words."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nightshift.emulator.errors import ApiError
from nightshift.emulator.openai_checks import check_body, parse_input_file

ENDPOINT = "/v1/chat/completions"


def function(name: str = "send_message", **fields: Any) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
    return {"type": "function", "function": {"name": name, "description": "Send.", "parameters": parameters, **fields}}


def call(call_id: str, name: str = "send_message") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}, *messages], **fields}


def refusal(body: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        check_body(body)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value


def test_a_well_formed_body_passes() -> None:
    body = chat(
        {"role": "assistant", "content": None, "tool_calls": [call("c" * 40)]},
        {"role": "tool", "tool_call_id": "c" * 40, "content": "ok"},
        tools=[function()],
        tool_choice="required",
        parallel_tool_calls=False,
        max_completion_tokens=10,
    )
    assert check_body(body) is body


def test_a_tool_call_id_over_40_characters() -> None:
    error = refusal(
        chat(
            {"role": "assistant", "content": None, "tool_calls": [call("c" * 41)]},
            {"role": "tool", "tool_call_id": "c" * 41, "content": "ok"},
        )
    )

    assert error.message == (
        "Invalid 'messages[1].tool_calls[0].id': string too long. Expected a string with maximum length 40, "
        "but got a string with length 41 instead."
    )
    assert (error.param, error.code) == ("messages[1].tool_calls[0].id", "string_above_max_length")


@pytest.mark.parametrize(
    ("tool", "message", "param", "code"),
    [
        (
            function("get weather"),
            "Invalid 'tools[0].function.name': string does not match pattern. "
            "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
            "tools[0].function.name",
            "invalid_value",
        ),
        (
            function("f" * 65),
            "Invalid 'tools[0].function.name': string too long. Expected a string with maximum length 64, "
            "but got a string with length 65 instead.",
            "tools[0].function.name",
            "string_above_max_length",
        ),
        (
            function(description="d" * 1025),
            "Invalid 'tools[0].function.description': string too long. Expected a string with maximum length 1024, "
            "but got a string with length 1025 instead.",
            "tools[0].function.description",
            "string_above_max_length",
        ),
        (
            function(parameters={"type": "object", "properties": []}),
            "Invalid schema for function 'send_message': [] is not of type 'object'.",
            "tools[0].function.parameters",
            "invalid_function_parameters",
        ),
        (
            function(parameters={"properties": {}}),
            """Invalid schema for function 'send_message': schema must be a JSON Schema of 'type: "object"', """
            """got 'type: "None"'.""",
            "tools[0].function.parameters",
            "invalid_function_parameters",
        ),
        (
            {**function(), "cache_control": {"type": "ephemeral"}},
            "Unknown parameter: 'tools[0].cache_control'.",
            "tools[0].cache_control",
            "unknown_parameter",
        ),
    ],
    ids=["name pattern", "name length", "description length", "invalid schema", "not an object schema", "extra"],
)
def test_tools(tool: dict[str, Any], message: str, param: str, code: str) -> None:
    error = refusal(chat(tools=[tool]))

    assert (error.message, error.param, error.code) == (message, param, code)


def test_unknown_request_arguments() -> None:
    one = refusal(chat(cache_control={"type": "ephemeral"}))
    two = refusal(chat(thinking={}, system="S"))

    assert (one.message, one.param, one.code) == ("Unrecognized request argument supplied: cache_control", None, None)
    assert two.message == "Unrecognized request arguments supplied: thinking, system"


def test_unknown_message_fields() -> None:
    error = refusal(chat({"role": "assistant", "content": "x", "reasoning": "hm"}))

    assert (error.message, error.param, error.code) == (
        "Unknown parameter: 'messages[1].reasoning'.",
        "messages[1].reasoning",
        "unknown_parameter",
    )


def test_calls_must_be_answered_and_results_must_answer_a_call() -> None:
    unanswered = refusal(chat({"role": "assistant", "content": None, "tool_calls": [call("c1")]}, {"role": "user"}))
    orphan = refusal(chat({"role": "tool", "tool_call_id": "c1", "content": "ok"}))
    late = refusal(
        chat(
            {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
            {"role": "user", "content": "?"},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        )
    )

    assert unanswered.message.startswith("An assistant message with 'tool_calls' must be followed by tool messages")
    assert unanswered.message.endswith("did not have response messages: c1")
    assert orphan.message == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
    )
    assert orphan.param == "messages.[1].role"
    assert "did not have response messages: c1" in late.message


def test_a_call_without_an_id() -> None:
    error = refusal(chat({"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}))

    assert (error.param, error.code) == ("messages[1].tool_calls[0].id", "missing_required_parameter")


def test_token_limit_below_one() -> None:
    error = refusal(chat(max_tokens=-1))

    assert (
        error.message == "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got -1 instead."
    )
    assert error.code == "integer_below_min_value"


def jsonl(*lines: Any) -> bytes:
    return b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)


def line(custom_id: str, **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": {**chat(), **body}}


def test_a_valid_file_gives_its_requests() -> None:
    requests, errors = parse_input_file(jsonl(line("a"), line("b", tools="not checked here")), ENDPOINT)

    assert errors == [] and [custom_id for custom_id, _ in requests] == ["a", "b"]


@pytest.mark.parametrize(
    ("bad", "code", "param", "message"),
    [
        (b"{oops", "invalid_json_line", None, "This line is not parseable as valid JSON."),
        ({"method": "POST", "url": ENDPOINT, "body": {}}, "missing_required_parameter", "custom_id", None),
        (
            {**line("x"), "method": None},
            "missing_required_parameter",
            "method",
            "Missing required parameter: 'method'.",
        ),
        ({**line("x"), "url": None}, "missing_required_parameter", "url", None),
        ({"custom_id": "x", "method": "POST", "url": ENDPOINT}, "missing_required_parameter", "body", None),
        ({**line("x"), "method": "GET"}, "invalid_method", "method", None),
        (
            {**line("x"), "url": "/v1/embeddings"},
            "invalid_url",
            "url",
            "The URL provided for this request does not match the batch endpoint.",
        ),
        (line("x", model=None), "invalid_request", "body.model", "Model parameter is required."),
        ({**line("x"), "body": {"model": "gpt-4o-mini"}}, "invalid_request", "body.messages", None),
        (
            line("x", stream=True),
            "streaming_unsupported",
            "body.stream",
            "Chat Completions: Streaming is not supported in the Batch API.",
        ),
        (line("a"), "duplicate_custom_id", "custom_id", None),
        (line("x", model="gpt-4o"), "mismatched_model", "body.model", None),
    ],
)
def test_a_bad_second_line_fails_the_file(bad: Any, code: str, param: str | None, message: str | None) -> None:
    _, errors = parse_input_file(jsonl(line("a"), bad), ENDPOINT)

    assert len(errors) == 1
    assert (errors[0]["code"], errors[0]["param"], errors[0]["line"]) == (code, param, 2)
    if message is not None:
        assert errors[0]["message"] == message


def test_every_bad_line_is_listed() -> None:
    _, errors = parse_input_file(jsonl(b"{", line("a"), b"[1]", line("a")), ENDPOINT)

    assert [(e["line"], e["code"]) for e in errors] == [
        (1, "invalid_json_line"),
        (3, "invalid_json_line"),
        (4, "duplicate_custom_id"),
    ]


def test_file_limits() -> None:
    data = jsonl(line("a"))
    _, too_large = parse_input_file(data, ENDPOINT, max_bytes=len(data) - 1)
    _, empty = parse_input_file(b"\n", ENDPOINT)

    assert [(e["code"], e["line"]) for e in too_large] == [("file_too_large", None)]
    assert [e["code"] for e in empty] == ["empty_file"]


PNG_URL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ=="


def test_image_parts_pass() -> None:
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}},
    ]
    body = chat({"role": "user", "content": parts})
    assert check_body(body) is body


@pytest.mark.parametrize(
    ("part", "says"),
    [
        ({"type": "image_url", "image_url": {"url": "data:image/bmp;base64,AAAA"}}, "Invalid image URL"),
        ({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}, "Invalid image URL"),
        ({"type": "image_url", "image_url": {}}, "image_url.url"),
        ({"type": "image", "source": {}}, "Invalid value: 'image'"),
    ],
    ids=["media type", "scheme", "no url", "anthropic shape"],
)
def test_bad_image_parts_are_refused(part: dict[str, Any], says: str) -> None:
    error = refusal(chat({"role": "user", "content": [part]}))
    assert says in error.message or says in str(error.param)


def test_the_flex_tier_is_for_the_models_that_have_it() -> None:
    check_body(chat(model="gpt-5-mini", service_tier="flex"))
    check_body(chat(service_tier="default"))
    assert "Flex is not available" in str(refusal(chat(service_tier="flex")))
    assert refusal(chat(service_tier="cheap")).param == "service_tier"
