"""Our provider layer (``ModelProvider``) against the emulator, for Anthropic and OpenAI alike."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.domain.messages import Message, Role
from nightshift.emulator import EmulatorAdmin, HttpFault, ScriptedError, ScriptedReply, ScriptedToolCall
from nightshift.errors import ProviderError
from nightshift.providers.base import (
    BatchOutcome,
    BatchState,
    CachePlan,
    CacheTtl,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OutcomeStatus,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from nightshift.providers.clients import ProviderSet
from nightshift.providers.registry import provider_info
from support.messages import SEND, WEATHER, msg
from support.submit import submit_requests

MODELS = {"anthropic": "claude-3-5-haiku-20241022", "openai": "gpt-4o-mini"}
APPEND = {
    "name": "core_memory_append",
    "description": "Append to a memory block.",
    "parameters": {
        "type": "object",
        "properties": {"label": {"type": "string"}, "content": {"type": "string"}},
        "required": ["label", "content"],
    },
}


def request(provider: str, *messages: Message, **fields: Any) -> ModelRequest:
    defaults: dict[str, Any] = {
        "model": MODELS[provider],
        "system": "You are Sam, a helpful agent. " * 20,
        "messages": messages or (msg(Role.USER, "hello"),),
        "tools": (SEND, WEATHER, APPEND),
        "max_tokens": 1024,
    }
    return ModelRequest(**{**defaults, **fields})


@pytest.fixture(params=["anthropic", "openai"], ids=["anthropic", "openai"])
def provider_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
async def providers(emulator: str) -> AsyncIterator[ProviderSet]:
    async with ProviderSet(max_retries=0) as built:
        yield built


@pytest.fixture
def provider(providers: ProviderSet, provider_name: str) -> ModelProvider:
    return providers.get(provider_name)


async def collect(provider: ModelProvider, batch_id: str) -> dict[str, BatchOutcome]:
    async with aclosing(provider.batch_results(batch_id)) as results:
        return {custom_id: outcome async for custom_id, outcome in results}


async def test_complete_calls_the_named_tool(provider: ModelProvider, provider_name: str) -> None:
    response = await provider.complete(
        request(provider_name, msg(Role.USER, "Please use get_weather for Paris"), temperature=0.3)
    )

    assert response.tool_call is not None
    assert response.tool_call.name == "get_weather"
    assert json.loads(response.tool_call.arguments) == {"city": "Paris"}
    assert response.reasoning and "get_weather" in response.reasoning
    assert response.request_heartbeat is True
    assert response.stop_reason in ("tool_use", "tool_calls")
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


async def test_cache_is_written_then_read(provider: ModelProvider, provider_name: str) -> None:
    # Anthropic writes where the request's plan marks it; OpenAI caches on its own.
    plan = CachePlan(tools=CacheTtl.FIVE_MINUTES, system=CacheTtl.FIVE_MINUTES)
    first = await provider.complete(request(provider_name, msg(Role.USER, "hi"), cache=plan))
    second = await provider.complete(request(provider_name, msg(Role.USER, "hi again"), cache=plan))

    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens > 0
    if provider_name == "anthropic":  # OpenAI does not report what it writes
        assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
        assert second.usage.cache_write_tokens == 0


async def test_anthropic_request_on_the_wire(providers: ProviderSet, admin: EmulatorAdmin) -> None:
    plan = CachePlan(tools=CacheTtl.ONE_HOUR, system=CacheTtl.FIVE_MINUTES)
    await providers.get("anthropic").complete(request("anthropic", temperature=0.9, cache=plan))

    sent = (await admin.requests(path="/v1/messages"))[0]
    assert sent["headers"]["anthropic-version"] == "2026-10-21"
    body = sent["body"]
    assert "temperature" not in body
    assert body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


async def test_a_whole_agent_step_loop(provider: ModelProvider, provider_name: str) -> None:
    history: list[Message] = [msg(Role.USER, '{"type": "user_message", "message": "remember that I like tea"}')]
    for _ in range(4):
        response = await provider.complete(request(provider_name, *history))
        assert response.tool_call is not None
        history.append(msg(Role.ASSISTANT, reasoning=response.reasoning, tool_calls=(response.tool_call,)))
        history.append(msg(Role.TOOL, '{"status": "OK", "message": "done"}', tool_call_id=response.tool_call.id))
        if not response.request_heartbeat:
            break
        history.append(msg(Role.USER, '{"type": "heartbeat", "reason": "request_heartbeat=true"}'))

    calls = [m.tool_calls[0].name for m in history if m.role is Role.ASSISTANT]
    assert calls == ["core_memory_append", "send_message"]
    first = json.loads(history[1].tool_calls[0].arguments)
    assert first == {"label": "human", "content": "I like tea"}


async def test_batch_outcomes(provider: ModelProvider, provider_name: str, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=1, errors={"agent-limited": "rate_limit_error"})
    await admin.script(
        "agent-scripted",
        ScriptedReply(
            tool_call=ScriptedToolCall(name="send_message", arguments={"message": "Hi!"}, inner_thoughts="Hm")
        ),
    )
    requests = {
        "agent-plain": request(provider_name),
        "agent-tool": request(provider_name, msg(Role.USER, "use get_weather for Rome")),
        "agent-limited": request(provider_name),
        "agent-scripted": request(provider_name),
    }
    batch_id = await submit_requests(provider, requests, tag="llm_batch-test")

    running = await provider.retrieve_batch(batch_id)
    assert running.state is BatchState.IN_PROGRESS and running.counts.total == 4
    ended = await provider.retrieve_batch(batch_id)
    assert ended.state is BatchState.ENDED and ended.ended_at is not None
    assert (ended.counts.succeeded, ended.counts.errored) == (3, 1)

    outcomes = await collect(provider, batch_id)
    assert set(outcomes) == set(requests)
    tool = outcomes["agent-tool"].response
    assert tool is not None and tool.tool_call is not None
    assert (tool.tool_call.name, json.loads(tool.tool_call.arguments)) == ("get_weather", {"city": "Rome"})
    limited = outcomes["agent-limited"]
    assert limited.status is OutcomeStatus.ERRORED and limited.error is not None
    assert limited.error.type == "rate_limit_error" and limited.error.retryable
    scripted = outcomes["agent-scripted"].response
    assert scripted is not None and scripted.tool_call is not None
    assert (scripted.reasoning, scripted.tool_call.arguments, scripted.request_heartbeat) == (
        "Hm",
        '{"message": "Hi!"}',
        False,
    )
    assert outcomes["agent-plain"].raw["custom_id"] == "agent-plain"


async def test_cancel(provider: ModelProvider, provider_name: str, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=3, cancel_polls=1)
    batch_id = await submit_requests(
        provider, {f"agent-{i}": request(provider_name) for i in range(4)}, tag="llm_batch-test"
    )
    await provider.retrieve_batch(batch_id)

    cancelling = await provider.cancel_batch(batch_id)
    assert cancelling.state is BatchState.CANCELING
    assert (await provider.retrieve_batch(batch_id)).state is BatchState.CANCELING
    ended = await provider.retrieve_batch(batch_id)
    assert ended.state is BatchState.ENDED
    assert (ended.counts.succeeded, ended.counts.canceled) == (1, 3)
    statuses = sorted(o.status for o in (await collect(provider, batch_id)).values())
    assert statuses == [OutcomeStatus.CANCELED] * 3 + [OutcomeStatus.SUCCEEDED]


async def test_expired_requests(provider: ModelProvider, provider_name: str, admin: EmulatorAdmin) -> None:
    await admin.configure(polls_to_end=3, expire_after_polls=0)
    batch_id = await submit_requests(
        provider, {f"agent-{i}": request(provider_name) for i in range(4)}, tag="llm_batch-test"
    )
    ended = await provider.retrieve_batch(batch_id)

    assert ended.state is BatchState.ENDED and ended.counts.expired == 3
    outcomes = await collect(provider, batch_id)
    assert sorted(o.status for o in outcomes.values()) == [OutcomeStatus.EXPIRED] * 3 + [OutcomeStatus.SUCCEEDED]


async def test_openai_requests_without_a_line_are_read_back_from_the_input(
    providers: ProviderSet, admin: EmulatorAdmin
) -> None:
    await admin.configure(polls_to_end=3, expire_after_polls=0, openai_unrun_lines=False)
    provider = providers.get("openai")
    batch_id = await submit_requests(
        provider, {f"agent-{i}": request("openai") for i in range(4)}, tag="llm_batch-test"
    )
    await provider.retrieve_batch(batch_id)

    outcomes = await collect(provider, batch_id)
    assert sorted(outcomes) == [f"agent-{i}" for i in range(4)]
    assert sorted(o.status for o in outcomes.values()) == [OutcomeStatus.EXPIRED] * 3 + [OutcomeStatus.SUCCEEDED]


async def test_results_before_the_end_are_an_error(
    provider: ModelProvider, provider_name: str, admin: EmulatorAdmin
) -> None:
    await admin.configure(polls_to_end=5)
    batch_id = await submit_requests(provider, {"agent-1": request(provider_name)}, tag="llm_batch-test")

    with pytest.raises(ProviderError):
        await collect(provider, batch_id)


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [(429, "rate_limit_error", True), (529, "overloaded_error", True), (500, "api_error", True)],
)
async def test_http_errors_become_provider_errors(
    provider: ModelProvider, provider_name: str, admin: EmulatorAdmin, status: int, kind: str, retryable: bool
) -> None:
    await admin.fault(HttpFault(path="/v1/*", status=status))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(request(provider_name))

    assert (caught.value.kind, caught.value.retryable) == (kind, retryable)


async def test_refused_request_is_not_retryable(provider: ModelProvider, provider_name: str) -> None:
    with pytest.raises(ProviderError) as caught:
        await provider.complete(request(provider_name, forced_tool="not_a_tool"))

    assert caught.value.kind == "invalid_request_error" and not caught.value.retryable


async def test_anthropic_sdk_refusal_is_a_provider_error(providers: ProviderSet) -> None:
    with pytest.raises(ProviderError, match="Streaming is required") as caught:
        await providers.get("anthropic").complete(request("anthropic", max_tokens=64_000))

    assert caught.value.kind == "invalid_request_error"


async def test_wrong_key_is_an_authentication_error(
    provider: ModelProvider, provider_name: str, admin: EmulatorAdmin
) -> None:
    await admin.configure(api_key="another-key")
    with pytest.raises(ProviderError) as caught:
        await provider.retrieve_batch("batch_missing")

    assert caught.value.kind == "authentication_error" and not caught.value.retryable


async def test_unknown_batch_is_not_found(provider: ModelProvider) -> None:
    with pytest.raises(ProviderError) as caught:
        await provider.retrieve_batch("msgbatch_unknown")

    assert caught.value.kind == "not_found_error"


@pytest.mark.parametrize(
    ("variable", "provider_name"), [("ANTHROPIC_API_KEY", "anthropic"), ("OPENAI_API_KEY", "openai")]
)
async def test_missing_key_names_the_variable(
    emulator: str, monkeypatch: pytest.MonkeyPatch, variable: str, provider_name: str
) -> None:
    monkeypatch.delenv(variable)
    async with ProviderSet() as providers:
        with pytest.raises(ProviderError, match=variable) as caught:
            providers.get(provider_name)
    assert caught.value.kind == "authentication_error"


@pytest.mark.parametrize(
    ("provider_name", "label", "path"),
    [("anthropic", "Anthropic", "/v1/messages/batches"), ("openai", "OpenAI", "/v1/files")],
)
async def test_unreachable_provider_names_the_address_tried(
    emulator: str, monkeypatch: pytest.MonkeyPatch, provider_name: str, label: str, path: str, refused_port: int
) -> None:
    info = provider_info(provider_name)
    closed = f"http://127.0.0.1:{refused_port}"
    monkeypatch.setenv(info.base_url_variable, closed + ("/v1" if provider_name == "openai" else ""))
    async with ProviderSet(max_retries=0) as providers:
        with pytest.raises(ProviderError) as caught:
            await submit_requests(providers.get(provider_name), {"a": request(provider_name)}, tag="llm_batch-test")

    assert caught.value.message == f"cannot reach {label} at {closed}{path}: connection refused"
    assert caught.value.kind == "api_connection_error"
    assert caught.value.retryable


async def test_openai_batch_takes_one_model(providers: ProviderSet) -> None:
    provider = providers.get("openai")
    with pytest.raises(ProviderError, match="one model"):
        await submit_requests(
            provider, {"a": request("openai"), "b": request("openai", model="gpt-4o")}, tag="llm_batch-test"
        )
    with pytest.raises(ProviderError, match="at least one"):
        await submit_requests(provider, {}, tag="llm_batch-test")


async def test_ten_thousand_requests_streamed(provider: ModelProvider, provider_name: str) -> None:
    small = request(provider_name, tools=(SEND,), system="You are Sam.")
    batch_id = await submit_requests(provider, {f"agent-{i:05d}": small for i in range(10_000)}, tag="llm_batch-test")
    ended = await provider.retrieve_batch(batch_id)
    assert ended.state is BatchState.ENDED and ended.counts.succeeded == 10_000

    seen = 0
    async with aclosing(provider.batch_results(batch_id)) as results:
        async for custom_id, outcome in results:
            assert outcome.status is OutcomeStatus.SUCCEEDED and custom_id.startswith("agent-")
            seen += 1
    assert seen == 10_000


async def test_find_batches_after_a_lost_answer(provider: ModelProvider, provider_name: str) -> None:
    # The provider accepted these, and our record of them was lost (a crash): they can be found again.
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    ours = await submit_requests(
        provider, {f"agent-{i}": request(provider_name) for i in range(3)}, tag="llm_batch-ours"
    )
    again = await submit_requests(
        provider, {f"agent-{i}": request(provider_name) for i in range(3)}, tag="llm_batch-ours"
    )
    other = await submit_requests(
        provider, {f"agent-{i}": request(provider_name) for i in range(2)}, tag="llm_batch-other"
    )

    found = await provider.find_batches("llm_batch-ours", created_after=before, requests=3)
    later = await provider.find_batches(
        "llm_batch-ours", created_after=datetime.now(UTC) + timedelta(hours=1), requests=3
    )

    assert found.ids == (ours, again)  # oldest first; never the batch of another size or tag
    assert other not in found.ids
    assert found.tagged is (provider_name == "openai")  # Anthropic's batches carry no metadata
    assert later.ids == ()


async def events(provider: ModelProvider, name: str, *messages: Message, **fields: Any) -> list[StreamEvent]:
    async with aclosing(provider.stream(request(name, *messages, **fields))) as stream:
        return [event async for event in stream]


async def test_stream_builds_the_answer_complete_gives(provider: ModelProvider, provider_name: str) -> None:
    question = msg(Role.USER, "Please use get_weather for Paris")
    streamed = await events(provider, provider_name, question)
    whole = await provider.complete(request(provider_name, question))

    *deltas, end = streamed
    assert isinstance(end, StreamEnd)
    assert all(isinstance(d, TextDelta | ToolCallDelta) for d in deltas)
    calls = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert len(calls) > 2, "the arguments come in several pieces"
    assert calls[0].name == "get_weather" and calls[0].id is not None
    assert all(d.index == 0 for d in calls)
    written = json.loads("".join(d.arguments for d in calls))
    assert written["city"] == "Paris" and written["request_heartbeat"] is True

    response: ModelResponse = end.response
    assert response.tool_call is not None and whole.tool_call is not None
    assert response.tool_call.name == "get_weather"
    assert json.loads(response.tool_call.arguments) == {"city": "Paris"}
    assert response.tool_call.id == calls[0].id
    assert (response.reasoning, response.request_heartbeat) == (whole.reasoning, whole.request_heartbeat)
    assert response.stop_reason == whole.stop_reason
    assert response.usage.output_tokens == whole.usage.output_tokens > 0
    assert response.usage.input_tokens + response.usage.cache_read_tokens > 0


async def test_stream_of_a_text_answer(provider: ModelProvider, provider_name: str) -> None:
    streamed = await events(provider, provider_name, msg(Role.USER, "hello there, how are you today?"), tools=())

    *deltas, end = streamed
    assert isinstance(end, StreamEnd)
    texts = [d.text for d in deltas if isinstance(d, TextDelta)]
    assert len(texts) > 1
    assert end.response.text == "".join(texts)
    assert end.response.tool_calls == ()


async def test_refused_stream_is_a_provider_error(provider: ModelProvider, provider_name: str) -> None:
    with pytest.raises(ProviderError) as caught:
        await events(provider, provider_name, forced_tool="not_a_tool")

    assert caught.value.kind == "invalid_request_error" and not caught.value.retryable


async def test_streamed_request_on_the_wire(provider: ModelProvider, provider_name: str, admin: EmulatorAdmin) -> None:
    await events(provider, provider_name)

    path = "/v1/messages" if provider_name == "anthropic" else "/v1/chat/completions"
    body = (await admin.requests(path=path))[0]["body"]
    assert body["stream"] is True
    if provider_name == "openai":
        assert body["stream_options"] == {"include_usage": True}


async def test_anthropic_error_inside_the_stream(providers: ProviderSet, admin: EmulatorAdmin) -> None:
    await admin.script("*", ScriptedReply(error=ScriptedError(type="overloaded_error", message="Overloaded")))
    received: list[StreamEvent] = []
    with pytest.raises(ProviderError) as caught:
        async with aclosing(providers.get("anthropic").stream(request("anthropic"))) as stream:
            received.extend([event async for event in stream])

    assert received == []
    assert caught.value.kind == "overloaded_error" and caught.value.retryable
    assert "Overloaded" in str(caught.value)
