"""The scripted provider keeps the ``ModelProvider`` contract: the same checks run against it and
against the real clients over the emulator, with the same knobs; then what only it can do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from integration.providers.test_model_providers import request
from nightshift.domain.messages import Role
from nightshift.domain.usage import Usage
from nightshift.emulator import EmulatorAdmin, ScriptedReply
from nightshift.errors import ProviderError
from nightshift.providers.base import BatchOutcome, BatchState, ModelProvider, OutcomeStatus, StreamEnd
from nightshift.providers.clients import ProviderSet
from support.messages import msg
from support.scripted import NORMAL_CALLS, Reply, ScriptedModel, call, error, say
from support.submit import submit_requests


@dataclass
class Backend:
    """A provider and the knobs of what answers it: the emulator's admin API, or the scripted model."""

    provider: ModelProvider
    admin: EmulatorAdmin | None = None
    model: ScriptedModel | None = None

    async def configure(self, **update: Any) -> None:
        if self.admin is not None:
            await self.admin.configure(**update)
        else:
            assert self.model is not None
            self.model.configure(**update)

    async def script(self, key: str, *replies: ScriptedReply) -> None:
        if self.admin is not None:
            await self.admin.script(key, *replies)
        else:
            assert self.model is not None
            self.model.script(key, *replies)


@pytest.fixture(params=["anthropic", "openai"])
def provider_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(params=["emulator", "scripted"])
async def backend(request: pytest.FixtureRequest, provider_name: str) -> AsyncIterator[Backend]:
    if request.param == "scripted":
        model = ScriptedModel()
        yield Backend(provider=model.providers()[provider_name], model=model)
        return
    url: str = request.getfixturevalue("emulator")  # reset, the SDK variables pointing at it
    async with EmulatorAdmin(url) as admin, ProviderSet(max_retries=0) as providers:
        yield Backend(provider=providers.get(provider_name), admin=admin)


async def collect(provider: ModelProvider, batch_id: str) -> dict[str, BatchOutcome]:
    async with aclosing(provider.batch_results(batch_id)) as results:
        return {custom_id: outcome async for custom_id, outcome in results}


async def test_complete_answers_as_the_model_or_the_script(backend: Backend, provider_name: str) -> None:
    ruled = await backend.provider.complete(request(provider_name, msg(Role.USER, "Please use get_weather for Paris")))
    assert ruled.tool_call is not None and ruled.tool_call.name == "get_weather"
    assert json.loads(ruled.tool_call.arguments) == {"city": "Paris"} and ruled.request_heartbeat
    assert ruled.usage.input_tokens > 0 and ruled.usage.output_tokens > 0

    await backend.script(NORMAL_CALLS, say("scripted", heartbeat=True))
    scripted = await backend.provider.complete(request(provider_name))
    assert scripted.tool_call is not None and scripted.tool_call.name == "send_message"
    assert json.loads(scripted.tool_call.arguments) == {"message": "scripted"} and scripted.request_heartbeat


async def test_stream_ends_with_what_complete_gives(backend: Backend, provider_name: str) -> None:
    question = request(provider_name, msg(Role.USER, "Please use get_weather for Paris"))
    async with aclosing(backend.provider.stream(question)) as stream:
        events = [event async for event in stream]
    whole = await backend.provider.complete(question)
    assert isinstance(events[-1], StreamEnd) and sum(isinstance(e, StreamEnd) for e in events) == 1
    streamed = events[-1].response
    assert streamed.tool_call is not None and whole.tool_call is not None
    assert (streamed.tool_call.name, streamed.tool_call.arguments) == (whole.tool_call.name, whole.tool_call.arguments)


async def test_refusals_are_provider_errors(backend: Backend, provider_name: str) -> None:
    with pytest.raises(ProviderError) as refused:
        await backend.provider.complete(request(provider_name, forced_tool="not_a_tool"))
    assert refused.value.kind == "invalid_request_error" and not refused.value.retryable
    await backend.script(NORMAL_CALLS, error("overloaded_error"))
    with pytest.raises(ProviderError) as overloaded:
        await backend.provider.complete(request(provider_name))
    assert overloaded.value.kind == "overloaded_error" and overloaded.value.retryable
    with pytest.raises(ProviderError) as unknown:
        await backend.provider.retrieve_batch("msgbatch_unknown")
    assert unknown.value.kind == "not_found_error"
    with pytest.raises(ProviderError, match="at least one"):
        await submit_requests(backend.provider, {}, tag="llm_batch-test")


async def test_batch_outcomes(backend: Backend, provider_name: str) -> None:
    await backend.configure(polls_to_end=1, errors={"agent-limited": "rate_limit_error"})
    await backend.script("agent-scripted", call("send_message", message="Hi!"))
    requests = {
        "agent-plain": request(provider_name),
        "agent-tool": request(provider_name, msg(Role.USER, "use get_weather for Rome")),
        "agent-limited": request(provider_name),
        "agent-scripted": request(provider_name),
    }
    batch_id = await submit_requests(backend.provider, requests, tag="llm_batch-test")

    running = await backend.provider.retrieve_batch(batch_id)
    assert running.state is BatchState.IN_PROGRESS and running.counts.total == 4
    ended = await backend.provider.retrieve_batch(batch_id)
    assert ended.state is BatchState.ENDED and ended.ended_at is not None
    assert (ended.counts.succeeded, ended.counts.errored) == (3, 1)

    outcomes = await collect(backend.provider, batch_id)
    assert set(outcomes) == set(requests)
    tool = outcomes["agent-tool"].response
    assert tool is not None and tool.tool_call is not None
    assert (tool.tool_call.name, json.loads(tool.tool_call.arguments)) == ("get_weather", {"city": "Rome"})
    limited = outcomes["agent-limited"]
    assert limited.status is OutcomeStatus.ERRORED and limited.error is not None
    assert limited.error.type == "rate_limit_error" and limited.error.retryable
    scripted = outcomes["agent-scripted"].response
    assert scripted is not None and scripted.tool_call is not None
    assert json.loads(scripted.tool_call.arguments) == {"message": "Hi!"}
    assert outcomes["agent-plain"].raw["custom_id"] == "agent-plain"

    await backend.configure(polls_to_end=5)
    unfinished = await submit_requests(backend.provider, {"agent-1": request(provider_name)}, tag="llm_batch-test")
    with pytest.raises(ProviderError):
        await collect(backend.provider, unfinished)


async def test_cancel_and_expiry(backend: Backend, provider_name: str) -> None:
    await backend.configure(polls_to_end=3, cancel_polls=1)
    batch_id = await submit_requests(
        backend.provider, {f"agent-{i}": request(provider_name) for i in range(4)}, tag="t"
    )
    await backend.provider.retrieve_batch(batch_id)
    assert (await backend.provider.cancel_batch(batch_id)).state is BatchState.CANCELING
    assert (await backend.provider.retrieve_batch(batch_id)).state is BatchState.CANCELING
    cancelled = await backend.provider.retrieve_batch(batch_id)
    assert cancelled.state is BatchState.ENDED
    assert (cancelled.counts.succeeded, cancelled.counts.canceled) == (1, 3)
    statuses = sorted(o.status for o in (await collect(backend.provider, batch_id)).values())
    assert statuses == [OutcomeStatus.CANCELED] * 3 + [OutcomeStatus.SUCCEEDED]

    await backend.configure(polls_to_end=3, expire_after_polls=0, cancel_polls=0)
    expiring = await submit_requests(
        backend.provider, {f"agent-{i}": request(provider_name) for i in range(4)}, tag="t"
    )
    expired = await backend.provider.retrieve_batch(expiring)
    assert expired.state is BatchState.ENDED and expired.counts.expired == 3
    statuses = sorted(o.status for o in (await collect(backend.provider, expiring)).values())
    assert statuses == [OutcomeStatus.EXPIRED] * 3 + [OutcomeStatus.SUCCEEDED]


async def test_find_batches_after_a_lost_answer(backend: Backend, provider_name: str) -> None:
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    ours = await submit_requests(backend.provider, {f"a{i}": request(provider_name) for i in range(3)}, tag="ours")
    again = await submit_requests(backend.provider, {f"a{i}": request(provider_name) for i in range(3)}, tag="ours")
    other = await submit_requests(backend.provider, {f"a{i}": request(provider_name) for i in range(2)}, tag="other")

    found = await backend.provider.find_batches("ours", created_after=before, requests=3)
    later = await backend.provider.find_batches(
        "ours", created_after=datetime.now(UTC) + timedelta(hours=1), requests=3
    )
    assert found.ids == (ours, again) and other not in found.ids
    assert found.tagged is (provider_name == "openai")
    assert later.ids == ()


# What only the scripted provider does.


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


async def test_a_held_batch_stays_open_until_released_or_expired(model: ScriptedModel, provider_name: str) -> None:
    provider = model.providers()[provider_name]
    with model.holding():
        kept = await submit_requests(provider, {"a": request(provider_name)}, tag="t")
        lost = await submit_requests(provider, {"b": request(provider_name)}, tag="t")
    assert model.held() == sorted([kept, lost])
    for _ in range(3):
        assert (await provider.retrieve_batch(kept)).state is BatchState.IN_PROGRESS

    model.release(kept)
    model.expire(lost)
    assert (await provider.retrieve_batch(kept)).counts.succeeded == 1
    expired = await provider.retrieve_batch(lost)
    assert expired.state is BatchState.ENDED and expired.counts.expired == 1
    assert [o.status for o in (await collect(provider, lost)).values()] == [OutcomeStatus.EXPIRED]


async def test_replies_by_function_with_their_usage_and_the_requests_recorded(
    model: ScriptedModel, provider_name: str
) -> None:
    provider = model.providers()[provider_name]
    usage = Usage(input_tokens=7, output_tokens=3, cache_read_tokens=5)

    def by_custom_id(custom_id: str | None, _: object) -> Reply | None:
        return Reply(say(f"hi {custom_id}"), usage) if custom_id == "b" else None

    model.answer_with(by_custom_id)
    model.fail("c", kind="invalid_request_error")
    batch_id = await submit_requests(provider, {k: request(provider_name) for k in "abc"}, tag="t")
    await provider.retrieve_batch(batch_id)
    outcomes = await collect(provider, batch_id)

    answered = outcomes["b"].response
    assert answered is not None and answered.tool_call is not None
    assert json.loads(answered.tool_call.arguments) == {"message": "hi b"}
    assert (answered.usage.input_tokens, answered.usage.output_tokens, answered.usage.cache_read_tokens) == (7, 3, 5)
    assert outcomes["a"].response is not None and outcomes["a"].response.usage != usage
    assert outcomes["c"].error is not None and outcomes["c"].error.type == "invalid_request_error"
    assert [r.model for r in model.requests("b")] == [request(provider_name).model]
    assert len(model.calls()) == 3 and model.batches(provider_name) == [batch_id]
