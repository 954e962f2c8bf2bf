"""The official anthropic SDK against the emulator: Messages, Message Batches, state machine, knobs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import pytest

from nightshift.emulator import EmulatorAdmin, HttpFault, ScriptedError, ScriptedReply, ScriptedToolCall
from nightshift.providers.agent_arguments import with_agent_arguments


def tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = with_agent_arguments({"type": "object", "properties": properties, "required": list(properties)})
    return {"name": name, "description": name.replace("_", " "), "input_schema": schema}


TOOLS: Any = [tool("send_message", {"message": {"type": "string"}}), tool("get_weather", {"city": {"type": "string"}})]
SYSTEM: Any = [{"type": "text", "text": "You are Sam. " * 50, "cache_control": {"type": "ephemeral"}}]


def params(text: str = "hello", **extra: Any) -> Any:
    return {"model": "claude-test", "max_tokens": 512, "messages": [{"role": "user", "content": text}], **extra}


async def test_message_calls_the_named_tool(anthropic_sdk: anthropic.AsyncAnthropic) -> None:
    raw = await anthropic_sdk.messages.with_raw_response.create(
        **params("use get_weather for Paris"), tools=TOOLS, tool_choice={"type": "any"}
    )
    message = await raw.parse()

    assert raw.headers["request-id"].startswith("req_")
    assert message.stop_reason == "tool_use"
    block = message.content[0]
    assert block.type == "tool_use" and block.id.startswith("toolu_")
    assert block.name == "get_weather"
    assert block.input["city"] == "Paris"
    assert block.input["request_heartbeat"] is True
    assert block.input["inner_thoughts"]


async def test_prompt_cache_is_written_then_read(anthropic_sdk: anthropic.AsyncAnthropic) -> None:
    tools = [*TOOLS[:-1], {**TOOLS[-1], "cache_control": {"type": "ephemeral"}}]
    first = await anthropic_sdk.messages.create(**params("hi"), system=SYSTEM, tools=tools)
    second = await anthropic_sdk.messages.create(**params("hi again"), system=SYSTEM, tools=tools)
    plain = await anthropic_sdk.messages.create(**params("hi"))

    assert first.usage.cache_creation_input_tokens and first.usage.cache_creation_input_tokens > 100
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert plain.usage.cache_read_input_tokens == plain.usage.cache_creation_input_tokens == 0
    assert plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0


async def test_temperature_is_refused_from_version_2026_10_21(anthropic_sdk: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await anthropic_sdk.messages.create(**params(), extra_body={"temperature": 0.5})
    assert caught.value.type == "invalid_request_error"
    assert "temperature" in (caught.value.api_message or "")

    old = await anthropic_sdk.messages.create(
        **params(), extra_body={"temperature": 0.5}, extra_headers={"anthropic-version": "2023-06-01"}
    )
    assert old.type == "message"


async def test_invalid_requests_get_anthropic_error_bodies(emulator: str) -> None:
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=emulator, headers=headers) as http:
        no_max = await http.post("/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        open_call = await http.post(
            "/v1/messages",
            json=params(
                messages=[
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                    {"role": "user", "content": "y"},
                ]
            ),
        )
        unknown = await http.get("/v1/messages/nothing/here")

    assert no_max.status_code == 400
    body = no_max.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("max_tokens")
    assert body["request_id"] == no_max.headers["request-id"]
    assert open_call.status_code == 400 and "tool_result" in open_call.json()["error"]["message"]
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"


async def test_both_auth_styles_and_beta_query(emulator: str, admin: EmulatorAdmin) -> None:
    body = {"requests": [{"custom_id": "a", "params": params()}]}
    async with httpx.AsyncClient(base_url=emulator) as http:
        old_style = await http.post(
            "/v1/messages/batches?beta=true",
            json=body,
            headers={
                "x-api-key": "k",
                "anthropic-version": "2023-06-01",
                "anthropic-beta": "message-batches-2024-09-24",
            },
        )
        missing = await http.post("/v1/messages", json=params())
        await admin.configure(api_key="right")
        wrong = await http.post("/v1/messages", json=params(), headers={"authorization": "Bearer wrong"})
        right = await http.post("/v1/messages", json=params(), headers={"authorization": "Bearer right"})

    assert old_style.status_code == 200 and old_style.json()["type"] == "message_batch"
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    assert wrong.status_code == 401
    assert right.status_code == 200


async def test_batch_counts_stay_processing_until_it_ends(
    anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin, emulator: str
) -> None:
    await admin.configure(polls_to_end=2)
    requests: Any = [{"custom_id": f"agent-{i}", "params": params(f"hello {i}", tools=TOOLS)} for i in range(6)]
    created = await anthropic_sdk.messages.batches.create(requests=requests)

    assert created.id.startswith("msgbatch_")
    assert created.processing_status == "in_progress"
    assert created.results_url is None and created.ended_at is None
    assert (created.expires_at - created.created_at).total_seconds() == pytest.approx(86_400)
    for _ in range(2):
        polled = await anthropic_sdk.messages.batches.retrieve(created.id)
        assert polled.processing_status == "in_progress"
        assert polled.request_counts.processing == 6 and polled.request_counts.succeeded == 0
    ended = await anthropic_sdk.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.ended_at is not None
    assert ended.request_counts.processing == 0 and ended.request_counts.succeeded == 6
    assert ended.results_url == f"/v1/messages/batches/{created.id}/results"

    results = [r async for r in await anthropic_sdk.messages.batches.results(created.id)]
    assert sorted(r.custom_id for r in results) == sorted(f"agent-{i}" for i in range(6))
    first = results[0].result
    assert first.type == "succeeded"
    assert first.message.content[-1].type == "tool_use" and first.message.content[-1].name == "send_message"
    assert first.message.usage.service_tier == "batch"

    async with httpx.AsyncClient(base_url=emulator, headers={"x-api-key": "k"}) as http:
        raw = (await http.get(ended.results_url)).content
    assert raw.endswith(b"\n") and b"\n\n" not in raw and raw.count(b"\n") == 6
    assert all(json.loads(line)["result"]["type"] == "succeeded" for line in raw.splitlines())


async def test_results_before_the_end_are_refused(
    anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin
) -> None:
    await admin.configure(polls_to_end=5)
    batch = await anthropic_sdk.messages.batches.create(requests=[{"custom_id": "a", "params": params()}])
    with pytest.raises(anthropic.AnthropicError, match="results_url"):
        await anthropic_sdk.messages.batches.results(batch.id)


async def test_params_are_checked_per_request(anthropic_sdk: anthropic.AsyncAnthropic) -> None:
    requests: Any = [
        {"custom_id": "ok", "params": params()},
        {"custom_id": "no-model", "params": {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}},
        {"custom_id": "no-max", "params": {"model": "m", "messages": [{"role": "user", "content": "x"}]}},
        {"custom_id": "hot", "params": params(temperature=0.9)},
    ]
    batch = await anthropic_sdk.messages.batches.create(requests=requests)
    ended = await anthropic_sdk.messages.batches.retrieve(batch.id)
    results = {r.custom_id: r.result async for r in await anthropic_sdk.messages.batches.results(batch.id)}

    assert ended.request_counts.succeeded == 1 and ended.request_counts.errored == 3
    assert results["ok"].type == "succeeded"
    for custom_id, field in (("no-model", "model"), ("no-max", "max_tokens"), ("hot", "temperature")):
        result = results[custom_id]
        assert result.type == "errored"
        assert result.error.error.type == "invalid_request_error"
        assert result.error.error.message.startswith(field)


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([], "at least 1"),
        ([{"custom_id": "bad id!", "params": {}}], "pattern"),
        ([{"custom_id": "x" * 65, "params": {}}], "pattern"),
        ([{"custom_id": "a", "params": {}}, {"custom_id": "a", "params": {}}], "Duplicate"),
        ([{"custom_id": "a"}], "params"),
    ],
)
async def test_batch_creation_is_refused(anthropic_sdk: anthropic.AsyncAnthropic, requests: Any, message: str) -> None:
    with pytest.raises(anthropic.BadRequestError, match=message):
        await anthropic_sdk.messages.batches.create(requests=requests)


async def test_more_than_100000_requests_are_refused(emulator: str) -> None:
    body = {"requests": [{"custom_id": f"r{i}", "params": {}} for i in range(100_001)]}
    async with httpx.AsyncClient(base_url=emulator, headers={"x-api-key": "k"}) as http:
        response = await http.post("/v1/messages/batches", json=body)

    assert response.status_code == 400
    assert "at most 100000" in response.json()["error"]["message"]


async def test_list_is_newest_first_with_cursors(anthropic_sdk: anthropic.AsyncAnthropic) -> None:
    ids = []
    for i in range(5):
        batch = await anthropic_sdk.messages.batches.create(requests=[{"custom_id": f"r{i}", "params": params()}])
        ids.append(batch.id)
    newest_first = ids[::-1]

    page = await anthropic_sdk.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == newest_first[:2]
    assert page.has_more and page.first_id == newest_first[0] and page.last_id == newest_first[1]
    assert [b.id async for b in anthropic_sdk.messages.batches.list(limit=2)] == newest_first
    after = await anthropic_sdk.messages.batches.list(limit=2, after_id=newest_first[1])
    assert [b.id for b in after.data] == newest_first[2:4]
    before = await anthropic_sdk.messages.batches.list(limit=2, before_id=newest_first[3])
    assert [b.id for b in before.data] == newest_first[1:3] and before.has_more
    last = await anthropic_sdk.messages.batches.list(limit=2, before_id=newest_first[1])
    assert [b.id for b in last.data] == newest_first[:1] and not last.has_more


async def test_slow_cancel_keeps_processed_requests(
    anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin
) -> None:
    await admin.configure(polls_to_end=9, cancel_polls=1)
    requests: Any = [{"custom_id": f"r{i}", "params": params()} for i in range(10)]
    batch = await anthropic_sdk.messages.batches.create(requests=requests)
    await anthropic_sdk.messages.batches.retrieve(batch.id)  # one poll of ten: one request done

    canceling = await anthropic_sdk.messages.batches.cancel(batch.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
    assert (await anthropic_sdk.messages.batches.retrieve(batch.id)).processing_status == "canceling"
    ended = await anthropic_sdk.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (1, 9)
    kinds = [r.result.type async for r in await anthropic_sdk.messages.batches.results(batch.id)]
    assert sorted(kinds) == ["canceled"] * 9 + ["succeeded"]


async def test_delete_only_once_ended(anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=1)
    batch = await anthropic_sdk.messages.batches.create(requests=[{"custom_id": "a", "params": params()}])
    with pytest.raises(anthropic.BadRequestError):
        await anthropic_sdk.messages.batches.delete(batch.id)
    await anthropic_sdk.messages.batches.retrieve(batch.id)
    await anthropic_sdk.messages.batches.retrieve(batch.id)

    deleted = await anthropic_sdk.messages.batches.delete(batch.id)
    assert (deleted.id, deleted.type) == (batch.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        await anthropic_sdk.messages.batches.retrieve(batch.id)


async def test_expiry_after_polls(anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=3, expire_after_polls=1)
    requests: Any = [{"custom_id": f"r{i}", "params": params()} for i in range(4)]
    batch = await anthropic_sdk.messages.batches.create(requests=requests)
    assert (await anthropic_sdk.messages.batches.retrieve(batch.id)).processing_status == "in_progress"
    ended = await anthropic_sdk.messages.batches.retrieve(batch.id)

    assert ended.processing_status == "ended"
    assert (ended.request_counts.succeeded, ended.request_counts.expired) == (2, 2)


async def test_latency_in_seconds(anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin) -> None:
    await admin.configure(seconds_to_end=0.3)
    batch = await anthropic_sdk.messages.batches.create(requests=[{"custom_id": "a", "params": params()}])
    assert (await anthropic_sdk.messages.batches.retrieve(batch.id)).processing_status == "in_progress"
    await asyncio.sleep(0.35)
    assert (await anthropic_sdk.messages.batches.retrieve(batch.id)).processing_status == "ended"


async def test_held_back_requests_keep_the_batch_open_until_their_hour_has_passed(
    anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin
) -> None:
    await admin.configure(held_back_fraction=0.25, held_back_seconds=3_600)
    requests: Any = [{"custom_id": f"r{i}", "params": params()} for i in range(40)]
    batch = await anthropic_sdk.messages.batches.create(requests=requests)

    # The others are done at once (the default), but the batch waits for its stragglers (Anthropic
    # counts every request as processing until the batch ends).
    early = await anthropic_sdk.messages.batches.retrieve(batch.id)
    assert early.processing_status == "in_progress" and early.request_counts.processing == 40
    await admin.advance(3_599)
    assert (await anthropic_sdk.messages.batches.retrieve(batch.id)).processing_status == "in_progress"
    await admin.advance(1)  # no waiting: the emulator's clock moves on
    ended = await anthropic_sdk.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.request_counts.succeeded == 40
    assert {r.custom_id async for r in await anthropic_sdk.messages.batches.results(batch.id)} == {
        f"r{i}" for i in range(40)
    }


async def test_the_clock_goes_forward_only(emulator: str) -> None:
    async with httpx.AsyncClient(base_url=emulator) as http:
        back = await http.post("/_emulator/clock", json={"advance": -1})
        ahead = await http.post("/_emulator/clock", json={"advance": 60})
    assert back.status_code == 422 and back.json()["error"] == "invalid admin request"
    assert ahead.status_code == 200 and ahead.json()["now"] > 0


async def test_expiry_after_seconds(anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin) -> None:
    await admin.configure(seconds_to_end=60, expire_after_seconds=0.2)
    batch = await anthropic_sdk.messages.batches.create(requests=[{"custom_id": "a", "params": params()}])
    assert (batch.expires_at - batch.created_at).total_seconds() == pytest.approx(0.2, abs=0.01)
    await asyncio.sleep(0.25)
    ended = await anthropic_sdk.messages.batches.retrieve(batch.id)

    assert ended.processing_status == "ended" and ended.request_counts.expired == 1
    assert [r.result.type async for r in await anthropic_sdk.messages.batches.results(batch.id)] == ["expired"]


async def test_injected_errors_and_scripts(anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin) -> None:
    await admin.configure(
        errors={"limited": "rate_limit_error", "refused": "invalid_request_error"},
        error_fraction=0.5,
        error_type="overloaded_error",
    )
    await admin.script(
        "scripted",
        ScriptedReply(tool_call=ScriptedToolCall(name="get_weather", arguments={"city": "Oslo"}), text="Thinking"),
    )
    await admin.script("broken", ScriptedReply(error=ScriptedError(type="api_error", message="boom")))
    ids = ["limited", "refused", "scripted", "broken", *[f"r{i}" for i in range(40)]]
    requests: Any = [{"custom_id": c, "params": params(tools=TOOLS)} for c in ids]
    batch = await anthropic_sdk.messages.batches.create(requests=requests)
    await anthropic_sdk.messages.batches.retrieve(batch.id)
    results: dict[str, Any] = {
        r.custom_id: r.result async for r in await anthropic_sdk.messages.batches.results(batch.id)
    }

    assert results["limited"].type == "errored" and results["limited"].error.error.type == "rate_limit_error"
    assert results["refused"].error.error.type == "invalid_request_error"
    assert results["broken"].type == "errored" and results["broken"].error.error.message == "boom"
    scripted = results["scripted"]
    assert scripted.type == "succeeded"
    assert scripted.message.content[0].type == "text" and scripted.message.content[0].text == "Thinking"
    call = scripted.message.content[1]
    assert call.type == "tool_use" and call.input["city"] == "Oslo"
    assert call.input["inner_thoughts"] and call.input["request_heartbeat"] is False
    overloaded = [c for c in ids[4:] if results[c].type == "errored"]
    assert 10 <= len(overloaded) <= 30  # about half, chosen by a hash of the custom_id
    assert all(results[c].error.error.type == "overloaded_error" for c in overloaded)


async def test_script_for_normal_calls(anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin) -> None:
    await admin.script("*", ScriptedReply(text="Scripted answer"))
    scripted = await anthropic_sdk.messages.create(**params(), tools=TOOLS)
    unscripted = await anthropic_sdk.messages.create(**params(), tools=TOOLS)

    assert scripted.content[0].type == "text" and scripted.content[0].text == "Scripted answer"
    assert scripted.stop_reason == "end_turn"
    assert unscripted.stop_reason == "tool_use"
    seen = await admin.model_calls(api="anthropic")
    assert len(seen) == 2 and seen[0]["body"]["messages"][0]["content"] == "hello"


async def test_sdk_retries_through_a_429(emulator: str, admin: EmulatorAdmin) -> None:
    await admin.fault(HttpFault(path="/v1/messages", status=429, count=1, should_retry=True, retry_after_ms=10))
    async with anthropic.AsyncAnthropic(max_retries=2) as client:
        message = await client.messages.create(**params())

    assert message.type == "message"
    logged = await admin.requests(path="/v1/messages")
    assert len(logged) == 1 and logged[0]["headers"]["x-stainless-retry-count"] == "1"


async def test_faults_without_retries(emulator: str, admin: EmulatorAdmin) -> None:
    await admin.fault(
        HttpFault(path="/v1/messages/batches*", status=529, count=1, retry_after=0),
        HttpFault(path="/v1/messages", status=500, count=1, should_retry=False),
    )
    async with anthropic.AsyncAnthropic(max_retries=0) as client:
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            await client.messages.batches.list()
        assert overloaded.value.type == "overloaded_error"
        assert overloaded.value.response.headers["retry-after"] == "0"
    async with anthropic.AsyncAnthropic(max_retries=3) as client:
        with pytest.raises(anthropic.InternalServerError) as failed:
            await client.messages.create(**params())  # x-should-retry: false wins over max_retries
        assert failed.value.status_code == 500
        assert (await client.messages.create(**params())).type == "message"


def exchange(call_id: str, answer_id: str | None = None, name: str = "get_weather") -> list[dict[str, Any]]:
    """An assistant turn calling one tool and the user turn with its result (by ``answer_id``)."""
    use = {"type": "tool_use", "id": call_id, "name": name, "input": {"city": "Oslo"}}
    result = {"type": "tool_result", "tool_use_id": answer_id or call_id, "content": "sunny"}
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


def asked(*turns: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "weather in Oslo?"}, *turns]


@pytest.mark.parametrize(
    ("request_params", "message"),
    [
        (
            {"tools": [{**TOOLS[0], "name": "send.message"}]},
            "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            {"tools": [{**TOOLS[0], "input_schema": {"type": "string"}}]},
            "tools.0.custom.input_schema.type: Input should be 'object'",
        ),
        (
            {"tools": [{**TOOLS[0], "input_schema": {"type": "object", "properties": {"message": "text"}}}]},
            "tools.0.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12",
        ),
        ({"extra_body": {"reasoning": {"effort": "low"}}}, "reasoning: Extra inputs are not permitted"),
        (
            {"messages": asked(*exchange("call.1"))},
            "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        (
            {"messages": asked(*exchange("toolu_1", "toolu:1"))},
            "messages.2.content.0.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        (
            {"messages": asked(*exchange("toolu_1")[:1], {"role": "user", "content": "and?"})},
            "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        ),
        (
            {"messages": exchange("toolu_1", "toolu_2")[1:]},
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_2. "
            "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
        ),
        (
            {"messages": asked(*exchange("toolu_1"), *exchange("toolu_1"))},
            "messages.3.content.0: `tool_use` ids must be unique",
        ),
    ],
    ids=[
        "tool name",
        "schema not an object",
        "invalid schema",
        "unknown field",
        "tool_use id",
        "tool_use_id",
        "unanswered call",
        "stray result",
        "repeated id",
    ],
)
async def test_messages_the_api_refuses(
    anthropic_sdk: anthropic.AsyncAnthropic, request_params: dict[str, Any], message: str
) -> None:
    arguments: Any = {**params(), "tools": TOOLS, **request_params}
    with pytest.raises(anthropic.BadRequestError) as caught:
        await anthropic_sdk.messages.create(**arguments)

    assert caught.value.status_code == 400
    body: Any = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(message)


async def test_one_refused_request_is_an_errored_result_of_a_valid_batch(
    anthropic_sdk: anthropic.AsyncAnthropic,
) -> None:
    requests: Any = [
        {"custom_id": "ok", "params": params(tools=TOOLS, messages=asked(*exchange("toolu_1")))},
        {"custom_id": "bad-id", "params": params(tools=TOOLS, messages=asked(*exchange("call.1")))},
        {"custom_id": "extra", "params": {**params(), "reasoning": {"effort": "low"}}},
    ]
    batch = await anthropic_sdk.messages.batches.create(requests=requests)
    ended = await anthropic_sdk.messages.batches.retrieve(batch.id)
    results = {r.custom_id: r.result async for r in await anthropic_sdk.messages.batches.results(batch.id)}

    assert (ended.request_counts.succeeded, ended.request_counts.errored) == (1, 2)
    assert results["ok"].type == "succeeded"
    for custom_id, message in (
        ("bad-id", "messages.1.content.0.tool_use.id: String should match pattern"),
        ("extra", "reasoning: Extra inputs are not permitted"),
    ):
        result = results[custom_id]
        assert result.type == "errored" and result.error.error.type == "invalid_request_error"
        assert result.error.error.message.startswith(message)


async def test_a_prompt_over_the_models_window_is_refused_as_too_long(
    anthropic_sdk: anthropic.AsyncAnthropic, admin: EmulatorAdmin
) -> None:
    await admin.configure(context_windows={"claude-test": 600})
    # "hello" fits; 2,000 characters (500 tokens) and 512 for the answer do not; 4,000 alone do not.
    await anthropic_sdk.messages.create(**params())

    with pytest.raises(anthropic.BadRequestError) as near:
        await anthropic_sdk.messages.create(**params("x" * 2_000))
    with pytest.raises(anthropic.BadRequestError) as over:
        await anthropic_sdk.messages.create(**params("x" * 4_000))

    assert near.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "input length and `max_tokens` exceed context limit" in near.value.message
    assert "prompt is too long: " in over.value.message and "> 600 maximum" in over.value.message
    # In a batch, the same request is an errored result.
    batch = await anthropic_sdk.messages.batches.create(
        requests=[{"custom_id": "long", "params": params("x" * 4_000)}, {"custom_id": "short", "params": params()}]
    )
    await anthropic_sdk.messages.batches.retrieve(batch.id)
    results = {r.custom_id: r.result async for r in await anthropic_sdk.messages.batches.results(batch.id)}
    assert results["short"].type == "succeeded"
    assert results["long"].type == "errored" and "prompt is too long" in results["long"].error.error.message
