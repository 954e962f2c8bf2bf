"""The emulator's Gemini API through Google's own SDK (``google-genai``), as a user of it would call it.

What our provider's tests (``test_gemini_provider.py``) do not reach: the SDK's own calls of a
batch (list pages, delete), a result file and an uploaded file, keys, Google's error shapes,
refusals, and the knobs of unrun requests and of the inline limit.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from nightshift.emulator import EmulatorAdmin, HttpFault

MODEL = "gemini-2.5-flash"
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather of a city.",
    parameters=types.Schema(
        type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING)}, required=["city"]
    ),
)


def sdk(emulator: str, key: str = "gemini-test-key") -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=emulator, api_version="v1beta"))


@pytest.fixture
async def client(emulator: str) -> AsyncIterator[genai.client.AsyncClient]:
    made = sdk(emulator).aio
    yield made
    await made.aclose()


def line(key: str, text: str) -> dict[str, Any]:
    return {"key": key, "request": {"contents": [{"role": "user", "parts": [{"text": text}]}]}}


async def upload(client: genai.client.AsyncClient, lines: list[dict[str, Any]]) -> str:
    data = io.BytesIO(b"".join(json.dumps(item).encode() + b"\n" for item in lines))
    uploaded = await client.files.upload(file=data, config=types.UploadFileConfig(mime_type="application/jsonl"))
    assert uploaded.name is not None and uploaded.state == types.FileState.ACTIVE
    return uploaded.name


async def test_a_tool_is_called_and_thoughts_come_when_asked(client: genai.client.AsyncClient) -> None:
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        thinking_config=types.ThinkingConfig(include_thoughts=True),
        system_instruction="You are Sam.",
    )
    response = await client.models.generate_content(model=MODEL, contents="Use get_weather for Oslo", config=config)

    assert response.function_calls is not None
    assert [(c.name, c.args) for c in response.function_calls] == [("get_weather", {"city": "Oslo"})]
    parts = response.candidates[0].content.parts if response.candidates and response.candidates[0].content else []
    assert parts and parts[0].thought is True
    usage = response.usage_metadata
    assert (
        usage is not None and usage.prompt_token_count and usage.candidates_token_count and usage.thoughts_token_count
    )


async def test_a_streamed_answer_is_the_whole_answer_in_pieces(client: genai.client.AsyncClient) -> None:
    whole = await client.models.generate_content(model=MODEL, contents="Tell me about the sea, please.")
    chunks = [
        c
        async for c in await client.models.generate_content_stream(
            model=MODEL, contents="Tell me about the sea, please."
        )
    ]

    assert len(chunks) > 1
    assert "".join(c.text or "" for c in chunks) == whole.text
    assert chunks[-1].candidates and chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata is not None


async def test_a_file_batch_ends_with_a_result_file_and_is_listed_and_deleted(
    client: genai.client.AsyncClient, admin: EmulatorAdmin
) -> None:
    await admin.configure(polls_to_end=1, errors={"b": "rate_limit_error"})
    name = await upload(client, [line("a", "hello"), line("b", "hi"), line("c", "hey")])
    job = await client.batches.create(model=MODEL, src=name, config=types.CreateBatchJobConfig(display_name="mine"))
    assert job.name is not None and job.display_name == "mine" and job.state == types.JobState.JOB_STATE_PENDING

    assert (await client.batches.get(name=job.name)).state == types.JobState.JOB_STATE_RUNNING
    ended = await client.batches.get(name=job.name)
    assert ended.state == types.JobState.JOB_STATE_SUCCEEDED
    assert ended.dest is not None and ended.dest.file_name is not None
    results = await client.files.download(file=ended.dest.file_name)
    lines = {item["key"]: item for item in map(json.loads, results.splitlines())}
    assert set(lines) == {"a", "b", "c"}
    assert lines["a"]["response"]["candidates"][0]["content"]["role"] == "model"
    assert lines["b"]["error"] == {"code": 8, "message": "rate limit error"}  # an RPC status, not HTTP

    listed = [j.name async for j in await client.batches.list(config=types.ListBatchJobsConfig(page_size=1))]
    assert listed == [job.name]
    await client.batches.delete(name=job.name)
    with pytest.raises(errors.ClientError) as gone:
        await client.batches.get(name=job.name)
    assert gone.value.code == 404 and gone.value.status == "NOT_FOUND"


@pytest.mark.parametrize(("unrun_entries", "expected"), [(True, {"b": 4, "c": 4}), (False, {})])
async def test_requests_an_expired_batch_never_ran(
    client: genai.client.AsyncClient, admin: EmulatorAdmin, unrun_entries: bool, expected: dict[str, int]
) -> None:
    await admin.configure(polls_to_end=3, expire_after_polls=1, gemini_unrun_entries=unrun_entries)
    requests: list[types.InlinedRequestDict] = [
        {"contents": "hello", "metadata": {"key": key}} for key in ("a", "b", "c")
    ]
    job = await client.batches.create(model=MODEL, src=requests)
    assert job.name is not None
    for _ in range(3):
        job = await client.batches.get(name=job.name)
        assert job.name is not None

    assert job.state == types.JobState.JOB_STATE_EXPIRED
    assert job.dest is not None and job.dest.inlined_responses is not None
    entries = job.dest.inlined_responses
    assert entries[0].metadata == {"key": "a"} and entries[0].response is not None
    unrun = {(e.metadata or {})["key"]: e.error.code for e in entries[1:] if e.error is not None}
    assert unrun == expected


async def test_an_inline_body_over_the_limit_is_refused(client: genai.client.AsyncClient, admin: EmulatorAdmin) -> None:
    await admin.configure(gemini_inline_bytes=500)
    requests: list[types.InlinedRequestDict] = [{"contents": "hello " * 100, "metadata": {"key": "a"}}]
    with pytest.raises(errors.ClientError) as refused:
        await client.batches.create(model=MODEL, src=requests)

    assert refused.value.code == 400 and "payload size exceeds the limit" in str(refused.value.message)


async def test_keys_are_checked_as_google_does(emulator: str, admin: EmulatorAdmin) -> None:
    await admin.configure(api_key="the-key")
    wrong = sdk(emulator, key="another").aio
    with pytest.raises(errors.ClientError) as refused:
        await wrong.models.generate_content(model=MODEL, contents="hi")
    await wrong.aclose()

    assert (refused.value.code, refused.value.status) == (400, "INVALID_ARGUMENT")
    assert "API_KEY_INVALID" in json.dumps(refused.value.details)
    right = sdk(emulator, key="the-key").aio
    assert (await right.models.generate_content(model=MODEL, contents="hi")).text
    await right.aclose()


async def test_faults_and_refusals_come_in_googles_shape(
    client: genai.client.AsyncClient, admin: EmulatorAdmin
) -> None:
    await admin.fault(HttpFault(path="/v1beta/*", status=503))
    with pytest.raises(errors.ServerError) as overloaded:
        await client.models.generate_content(model=MODEL, contents="hi")
    assert (overloaded.value.code, overloaded.value.status) == (503, "UNAVAILABLE")

    with pytest.raises(errors.ClientError) as refused:
        await client.models.generate_content(model=MODEL, contents=[{"role": "assistant", "parts": [{"text": "hi"}]}])
    assert (refused.value.code, refused.value.status) == (400, "INVALID_ARGUMENT")
    assert "valid role" in str(refused.value.message)
    with pytest.raises(errors.ClientError) as unknown:
        await client.batches.get(name="batches/none")
    assert unknown.value.code == 404
