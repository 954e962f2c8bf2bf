"""Our Gemini provider (``google_ai``) through ``google-genai`` against the emulator's Gemini API.

What the other providers' tests (``test_model_providers.py``) check, where Gemini differs: batches
inline and by uploaded file, results matched by key, a batch found again by its display name, the
requests of an expired or cancelled batch without a result, and errors in Google's shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.domain.messages import Message, Role
from nightshift.emulator import EmulatorAdmin, HttpFault, ScriptedReply, ScriptedToolCall
from nightshift.errors import ProviderError
from nightshift.providers.base import (
    BatchOutcome,
    BatchState,
    ModelProvider,
    ModelRequest,
    OutcomeStatus,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
)
from nightshift.providers.clients import ProviderSet
from nightshift.providers.google_ai.client import INLINE_VARIABLE
from support.messages import SEND, WEATHER, msg
from support.submit import submit_requests


def request(*messages: Message, **fields: Any) -> ModelRequest:
    defaults: dict[str, Any] = {
        "model": "gemini-2.5-flash",
        "system": "You are Sam, a helpful agent. " * 20,
        "messages": messages or (msg(Role.USER, "hello"),),
        "tools": (SEND, WEATHER),
        "max_tokens": 1024,
    }
    return ModelRequest(**{**defaults, **fields})


@pytest.fixture
async def gemini(emulator: str) -> AsyncIterator[ModelProvider]:
    async with ProviderSet(max_retries=0) as built:
        yield built.get("google_ai")


async def collect(provider: ModelProvider, batch_id: str) -> dict[str, BatchOutcome]:
    async with aclosing(provider.batch_results(batch_id)) as results:
        return {custom_id: outcome async for custom_id, outcome in results}


async def ended(provider: ModelProvider, batch_id: str) -> None:
    for _ in range(20):
        if (await provider.retrieve_batch(batch_id)).state is BatchState.ENDED:
            return
    raise AssertionError(f"batch {batch_id} did not end")


async def test_complete_calls_the_named_tool_and_reports_usage(gemini: ModelProvider) -> None:
    response = await gemini.complete(request(msg(Role.USER, "Please use get_weather for Paris"), temperature=0.3))

    assert response.tool_call is not None
    assert (response.tool_call.name, json.loads(response.tool_call.arguments)) == ("get_weather", {"city": "Paris"})
    assert response.reasoning and response.request_heartbeat is True
    assert response.tool_call.id.startswith("call_")
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


async def test_stream_builds_the_answer_complete_gives(gemini: ModelProvider) -> None:
    question = msg(Role.USER, "Please use get_weather for Paris")
    async with aclosing(gemini.stream(request(question))) as stream:
        events = [event async for event in stream]
    whole = await gemini.complete(request(question))

    assert isinstance(events[-1], StreamEnd)
    streamed = events[-1].response
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [c.name for c in calls] == ["get_weather"]
    assert streamed.tool_calls[0].arguments == whole.tool_calls[0].arguments
    text = await gemini.complete(request(msg(Role.USER, "hi"), tools=()))
    async with aclosing(gemini.stream(request(msg(Role.USER, "hi"), tools=()))) as stream:
        pieces = [e.text async for e in stream if isinstance(e, TextDelta)]
    assert "".join(pieces) == text.text


async def test_an_inline_batch_answers_each_request_by_its_key(gemini: ModelProvider, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=1, errors={"agent-limited": "rate_limit_error"})
    await admin.script(
        "agent-scripted",
        ScriptedReply(
            tool_call=ScriptedToolCall(name="send_message", arguments={"message": "Hi!"}, inner_thoughts="Hm")
        ),
    )
    requests = {
        "agent-plain": request(),
        "agent-tool": request(msg(Role.USER, "use get_weather for Rome")),
        "agent-limited": request(),
        "agent-scripted": request(),
    }
    batch_id = await submit_requests(gemini, requests, tag="llm_batch-test")

    running = await gemini.retrieve_batch(batch_id)
    assert running.state is BatchState.IN_PROGRESS
    await ended(gemini, batch_id)
    outcomes = await collect(gemini, batch_id)

    assert set(outcomes) == set(requests)
    tool = outcomes["agent-tool"].response
    assert tool is not None and tool.tool_call is not None
    assert json.loads(tool.tool_call.arguments) == {"city": "Rome"}
    limited = outcomes["agent-limited"]
    assert limited.status is OutcomeStatus.ERRORED and limited.error is not None
    assert limited.error.type == "rate_limit_error"
    scripted = outcomes["agent-scripted"].response
    assert scripted is not None and (scripted.reasoning, scripted.tool_calls[0].arguments) == (
        "Hm",
        '{"message": "Hi!"}',
    )
    created = [r for r in await admin.requests(method="POST") if r["path"].endswith(":batchGenerateContent")]
    assert "requests" in created[0]["body"]["batch"]["inputConfig"]


async def test_a_batch_over_the_inline_limit_goes_and_comes_back_as_files(
    emulator: str, admin: EmulatorAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INLINE_VARIABLE, "2000")
    await admin.configure(polls_to_end=0)
    async with ProviderSet(max_retries=0) as built:
        gemini = built.get("google_ai")
        requests = {f"agent-{i:04d}": request(msg(Role.USER, f"hello {i}")) for i in range(300)}
        batch_id = await submit_requests(gemini, requests, tag="llm_batch-filed")
        await ended(gemini, batch_id)
        outcomes = await collect(gemini, batch_id)

    assert set(outcomes) == set(requests)
    assert {o.status for o in outcomes.values()} == {OutcomeStatus.SUCCEEDED}
    (created,) = [r for r in await admin.requests(method="POST") if r["path"].endswith(":batchGenerateContent")]
    assert created["body"]["batch"]["inputConfig"]["fileName"].startswith("files/")


async def test_cancelled_and_expired_batches_say_what_their_unanswered_requests_ended_as(
    gemini: ModelProvider, admin: EmulatorAdmin
) -> None:
    await admin.configure(polls_to_end=1000)
    cancelled = await submit_requests(gemini, {f"agent-{i}": request() for i in range(3)}, tag="llm_batch-cancel")
    await gemini.cancel_batch(cancelled)
    await ended(gemini, cancelled)
    status = await gemini.retrieve_batch(cancelled)
    assert (status.provider_status, status.unanswered) == ("cancelled", OutcomeStatus.CANCELED)
    assert set(await collect(gemini, cancelled)) <= {f"agent-{i}" for i in range(3)}

    await admin.configure(polls_to_end=5, expire_after_polls=0)
    expired = await submit_requests(gemini, {f"agent-{i}": request() for i in range(3)}, tag="llm_batch-expire")
    await ended(gemini, expired)
    status = await gemini.retrieve_batch(expired)
    assert (status.provider_status, status.unanswered) == ("expired", OutcomeStatus.EXPIRED)
    assert status.expires_at is not None and status.expires_at - status.created_at == timedelta(hours=48)


async def test_results_before_the_end_are_an_error(gemini: ModelProvider, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=5)
    batch_id = await submit_requests(gemini, {"agent-1": request()}, tag="llm_batch-test")
    with pytest.raises(ProviderError, match="no results yet"):
        await collect(gemini, batch_id)


async def test_a_batch_is_found_again_by_its_display_name(gemini: ModelProvider) -> None:
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    ours = await submit_requests(gemini, {f"agent-{i}": request() for i in range(3)}, tag="llm_batch-ours")
    again = await submit_requests(gemini, {f"agent-{i}": request() for i in range(3)}, tag="llm_batch-ours")
    other = await submit_requests(gemini, {f"agent-{i}": request() for i in range(3)}, tag="llm_batch-other")

    found = await gemini.find_batches("llm_batch-ours", created_after=before, requests=3)
    later = await gemini.find_batches(
        "llm_batch-ours", created_after=datetime.now(UTC) + timedelta(hours=1), requests=3
    )

    assert found.ids == (ours, again) and found.tagged
    assert other not in found.ids
    assert later.ids == ()


async def test_a_batch_takes_one_model(gemini: ModelProvider) -> None:
    with pytest.raises(ProviderError, match="one model"):
        await submit_requests(gemini, {"a": request(), "b": request(model="gemini-2.5-pro")}, tag="llm_batch-test")


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limit_error"), (503, "overloaded_error"), (500, "api_error")])
async def test_http_errors_become_provider_errors(
    gemini: ModelProvider, admin: EmulatorAdmin, status: int, kind: str
) -> None:
    await admin.fault(HttpFault(path="/v1beta/*", status=status))
    with pytest.raises(ProviderError) as caught:
        await gemini.complete(request())

    assert (caught.value.kind, caught.value.retryable) == (kind, True)


async def test_refused_requests_and_unknown_batches(gemini: ModelProvider, admin: EmulatorAdmin) -> None:
    with pytest.raises(ProviderError) as refused:
        await gemini.complete(request(forced_tool="not_a_tool"))
    assert refused.value.kind == "invalid_request_error" and not refused.value.retryable
    with pytest.raises(ProviderError) as unknown:
        await gemini.retrieve_batch("batches/unknown")
    assert unknown.value.kind == "not_found_error"
    await admin.configure(api_key="another-key")
    with pytest.raises(ProviderError) as wrong:
        await gemini.retrieve_batch("batches/unknown")
    assert wrong.value.kind in ("authentication_error", "permission_error") and not wrong.value.retryable


async def test_a_missing_key_or_an_unreachable_api_is_named(
    emulator: str, monkeypatch: pytest.MonkeyPatch, refused_port: int
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    async with ProviderSet() as providers:
        with pytest.raises(ProviderError, match="GEMINI_API_KEY is not set"):
            providers.get("google_ai")
    monkeypatch.setenv("GEMINI_API_KEY", "key")
    closed = f"http://127.0.0.1:{refused_port}"
    monkeypatch.setenv("GEMINI_BASE_URL", closed)
    async with ProviderSet(max_retries=0) as providers:
        with pytest.raises(ProviderError) as caught:
            await submit_requests(providers.get("google_ai"), {"a": request()}, tag="llm_batch-test")
    assert caught.value.message.startswith(f"cannot reach Gemini at {closed}/v1beta/")
    assert caught.value.message.endswith(": connection refused")
    assert caught.value.kind == "api_connection_error" and caught.value.retryable
