"""An in-process scripted model behind the provider seam, for tests of batch logic.

``ScriptedModel`` answers requests of both providers from memory: no HTTP server, no SDK, no poll
interval. It reuses what the emulator answers with (its pure model, its request checks, token
counts, prompt cache and batch state machine) and our own wire translation, so a request that the
real API would refuse is refused here too, and what a test reads back (the wire bodies the model
saw, ``calls``) is what it read through the emulator. What differs is the transport: a batch ends
at its first retrieve unless the test holds it, and nothing happens between two explicit passes.

Replies are scripted per custom_id (an agent's id; ``NORMAL_CALLS`` for ``complete`` and
``stream``) with the batch tests' vocabulary (``call``, ``say``, ``error``), or chosen by a
function of the request (``answer_with``); ``Reply`` gives one its usage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from nightshift.domain.usage import Usage
from nightshift.emulator import anthropic_api, openai_api
from nightshift.emulator.batches import BatchJob, Phase, RequestResult
from nightshift.emulator.config import EmulatorConfig, ScriptedError, ScriptedReply, ScriptedToolCall
from nightshift.emulator.state import NORMAL_SCRIPT_KEY, EmulatorState
from nightshift.emulator.streams import anthropic_events, openai_chunks
from nightshift.errors import ProviderError, ProviderErrorKind, is_retryable
from nightshift.providers import anthropic as anthropic_info
from nightshift.providers import openai as openai_info
from nightshift.providers.anthropic import wire as anthropic_wire
from nightshift.providers.base import (
    BatchOutcome,
    BatchStatus,
    FoundBatches,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamEnd,
    StreamEvent,
    one_model,
    parse_json_line,
)
from nightshift.providers.errors import kind_for_status, kind_of
from nightshift.providers.openai import wire as openai_wire
from nightshift.providers.spool import SpooledBody

Api = Literal["anthropic", "openai"]
# The key of the replies to normal (non-batch) calls.
NORMAL_CALLS = NORMAL_SCRIPT_KEY
# What the Anthropic SDK sends as ``anthropic-version``.
ANTHROPIC_VERSION = "2026-10-21"


def call(name: str, *, heartbeat: bool = False, **arguments: Any) -> ScriptedReply:
    """A scripted tool call."""
    return ScriptedReply(tool_call=ScriptedToolCall(name=name, arguments=arguments, request_heartbeat=heartbeat))


def say(message: str, *, heartbeat: bool = False) -> ScriptedReply:
    """A scripted send_message call."""
    return call("send_message", heartbeat=heartbeat, message=message)


def error(kind: str = "overloaded_error", message: str | None = None) -> ScriptedReply:
    """A scripted error of the provider's (``invalid_request_error``, ``rate_limit_error``...)."""
    return ScriptedReply(error=ScriptedError(type=kind, message=message))


@dataclass(frozen=True, slots=True)
class Reply:
    """A scripted reply with the usage the provider reports for it (instead of the counted one)."""

    reply: ScriptedReply
    usage: Usage


Answerer = Callable[[str | None, ModelRequest], ScriptedReply | Reply | None]


class ScriptedModel:
    """The in-memory state behind the scripted providers: scripts, batches and what was asked.

    ``providers()`` are the ``ModelProvider`` of each API over this state, to hand to
    ``ProviderSet(overrides=...)``.
    """

    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self.state = EmulatorState(config or EmulatorConfig())
        self._scripts: dict[str, deque[ScriptedReply | Reply]] = {}
        self._answerers: list[Answerer] = []
        self._requests: list[tuple[str | None, ModelRequest]] = []
        self._hold_new = False
        self._held: set[str] = set()
        self._tags: dict[str, str] = {}
        self._refusals: deque[str] = deque()

    # What the model answers.

    def script(self, key: str, *replies: ScriptedReply | Reply) -> None:
        """Queue replies for one custom_id (``NORMAL_CALLS``: normal calls), used in order."""
        self._scripts.setdefault(key, deque()).extend(replies)

    def answer_with(self, answerer: Answerer) -> None:
        """Choose the reply to a request without a scripted one by ``answerer(custom_id, request)``;
        None leaves it to the next answerer, then to the emulator's model."""
        self._answerers.append(answerer)

    def fail(self, *custom_ids: str, kind: str = "invalid_request_error") -> None:
        """Make every batch request of these custom_ids come back errored with ``kind``."""
        self.configure(errors={**self.state.config.errors, **dict.fromkeys(custom_ids, kind)})

    def configure(self, **update: Any) -> EmulatorConfig:
        """Change the emulator's knobs (``context_windows``, ``cache_min_tokens``...)."""
        return self.state.configure(update)

    def refuse_submits(self, kind: str = "overloaded_error", *, count: int = 1) -> None:
        """Refuse the next ``count`` batch submissions with a ``ProviderError`` of ``kind``."""
        self._refusals.extend([kind] * count)

    def take_refusal(self) -> ProviderError | None:
        """The error the next submission gets, if one was asked for."""
        if not self._refusals:
            return None
        kind = ProviderErrorKind(self._refusals.popleft())
        return ProviderError(f"the provider refused the batch: {kind}", kind=kind, retryable=is_retryable(kind))

    # Batch timing.

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Batches submitted in the block stay in progress until ``release`` (or ``expire``)."""
        self._hold_new = True
        try:
            yield
        finally:
            self._hold_new = False

    def release(self, *batch_ids: str) -> None:
        """Let held batches (every one without ids) end at their next retrieve."""
        self._held.difference_update(batch_ids or set(self._held))

    def held(self) -> list[str]:
        """The provider ids of the batches held open, oldest first."""
        return sorted(self._held)

    def expire(self, *batch_ids: str) -> None:
        """Make these batches (every held one without ids) expire at their next retrieve, no request run."""
        now = self.state.now()
        for batch_id in batch_ids or tuple(self._held):
            job = self._job(batch_id)
            job.timing = dataclasses.replace(job.timing, polls_to_end=2**62, expires_at=now - 1)
            self._held.discard(batch_id)

    # What the model saw.

    def calls(self, custom_id: str | None = None) -> list[dict[str, Any]]:
        """The wire bodies of the requests the model answered, oldest first (one custom_id's, if given)."""
        return [c["body"] for c in self.state.model_calls if custom_id is None or c["custom_id"] == custom_id]

    def batch_calls(self) -> list[dict[str, Any]]:
        """Every logged model call: ``api``, ``custom_id``, ``batch_id`` and ``body``, oldest first."""
        return list(self.state.model_calls)

    def requests(self, custom_id: str | None = None) -> list[ModelRequest]:
        """The neutral requests received, oldest first (one custom_id's, if given)."""
        return [r for key, r in self._requests if custom_id is None or key == custom_id]

    def normal_requests(self) -> list[ModelRequest]:
        """The neutral requests of the normal (not batch) calls, oldest first."""
        return [r for key, r in self._requests if key is None]

    def batches(self, api: str) -> list[str]:
        """The provider ids of every batch submitted to ``api`` (``anthropic`` or ``openai``), oldest first."""
        return list(self.jobs("anthropic" if api == "anthropic" else "openai"))

    def providers(self) -> dict[str, ModelProvider]:
        """A scripted provider per API name, over this model."""
        return {"anthropic": ScriptedProvider(self, "anthropic"), "openai": ScriptedProvider(self, "openai")}

    # Used by ScriptedProvider.

    def run(self, api: Api, custom_id: str | None, request: ModelRequest, *, batch_id: str | None) -> RequestResult:
        """Answer one request as the emulator would, with the reply the test chose (if any)."""
        self._requests.append((custom_id, request))
        key = custom_id if custom_id is not None else NORMAL_CALLS
        chosen = self._choose(key, custom_id, request)
        usage = None
        if chosen is not None:
            reply = chosen.reply if isinstance(chosen, Reply) else chosen
            usage = chosen.usage if isinstance(chosen, Reply) else None
            self.state.add_script(key, [reply])
        body = orjson.loads(orjson.dumps(_wire_body(api, request)))
        if api == "anthropic":
            result = anthropic_api.run(
                self.state, body, version=ANTHROPIC_VERSION, custom_id=custom_id, batch_id=batch_id
            )
        else:
            result = openai_api.run(self.state, body, custom_id=custom_id, batch_id=batch_id)
        if chosen is not None:
            self.state.scripts.get(key, deque()).clear()  # not taken: the request was refused first
        if usage is not None and result.ok:
            _set_usage(api, result.body, usage)
        return result

    def new_job(self, api: Api, custom_ids: list[str], batch_id: str, results: list[RequestResult]) -> BatchJob:
        """Keep a new batch, held if submitted in ``holding``."""
        extra = {"endpoint": openai_wire.ENDPOINT, "input_file_id": f"file-{batch_id}"} if api == "openai" else {}
        job = self.state.new_batch(batch_id, self.state.now(), list(zip(custom_ids, results, strict=True)), extra=extra)
        self.jobs(api)[batch_id] = job
        if self._hold_new:
            self._held.add(batch_id)
        return job

    def tag(self, batch_id: str, tag: str) -> None:
        """Keep the tag a batch was submitted with (OpenAI's metadata; Anthropic keeps none)."""
        self._tags[batch_id] = tag

    def tag_of(self, batch_id: str) -> str | None:
        """The tag a batch was submitted with, if its API keeps one."""
        return self._tags.get(batch_id)

    def find(self, api: Api, batch_id: str, *, poll: bool) -> BatchJob:
        """A batch brought up to date (a held one does not move), or ``not_found_error``."""
        job = self._job(batch_id, api)
        if batch_id not in self._held:
            job.refresh(self.state.now(), poll=poll)
        return job

    def _choose(self, key: str, custom_id: str | None, request: ModelRequest) -> ScriptedReply | Reply | None:
        queue = self._scripts.get(key)
        if queue:
            return queue.popleft()
        for answerer in self._answerers:
            chosen = answerer(custom_id, request)
            if chosen is not None:
                return chosen
        return None

    def jobs(self, api: Api) -> dict[str, BatchJob]:
        """The batches of one API by id, in the order they were submitted."""
        return self.state.anthropic_batches if api == "anthropic" else self.state.openai_batches

    def _job(self, batch_id: str, api: Api | None = None) -> BatchJob:
        for name in (api,) if api is not None else ("anthropic", "openai"):
            job = self.jobs(name).get(batch_id)
            if job is not None:
                return job
        raise ProviderError(f"no batch {batch_id!r}", kind=ProviderErrorKind.NOT_FOUND)


class ScriptedProvider:
    """One API (``anthropic`` or ``openai``) of a ``ScriptedModel`` as a ``ModelProvider``.

    Requests go through our wire translation and the emulator's checks and answers; batch results
    through the provider's result lines and our parsing of them, so their outcomes are the real
    client's for the same answers.
    """

    def __init__(self, model: ScriptedModel, api: Api) -> None:
        self._model = model
        self._api: Api = api
        self._encoded: dict[tuple[str, bytes], ModelRequest] = {}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return _response(self._api, self._answered(request))

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        body = self._answered(request)
        if self._api == "anthropic":
            anthropic_assembler = anthropic_wire.StreamAssembler()
            for data in _sse_data(anthropic_events(body)):
                for delta in anthropic_assembler.feed(data):
                    yield delta
            yield StreamEnd(response=anthropic_assembler.response())
            return
        openai_assembler = openai_wire.StreamAssembler()
        for data in _sse_data(openai_chunks(body, include_usage=True)):
            for delta in openai_assembler.feed(data):
                yield delta
        yield StreamEnd(response=openai_assembler.response())

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        """The real wire entry; the request it came from is kept for ``submit_batch`` (a test reads
        the requests a batch held as ``ModelRequest``)."""
        if self._api == "anthropic":
            entry = anthropic_wire.batch_entry(custom_id, request)
        else:
            entry = openai_wire.batch_entry(custom_id, request)
        self._encoded[custom_id, entry] = request
        return entry

    async def submit_batch(
        self, requests: Mapping[str, bytes], *, model: str | None, tag: str, max_bytes: int | None = None
    ) -> str:
        if not requests:
            raise ProviderError("a batch needs at least one request", kind=ProviderErrorKind.INVALID_REQUEST)
        if self._api == "openai":
            one_model(requests, model, provider="OpenAI")
        self._check_size(requests, max_bytes)
        built = {custom_id: self._encoded.pop((custom_id, entry)) for custom_id, entry in requests.items()}
        refused = self._model.take_refusal()
        if refused is not None:
            raise refused
        batch_id = self._model.state.next_id("msgbatch_" if self._api == "anthropic" else "batch_")
        results = [self._model.run(self._api, cid, r, batch_id=batch_id) for cid, r in built.items()]
        self._model.new_job(self._api, list(requests), batch_id, results)
        if self._api == "openai":
            self._model.tag(batch_id, tag)
        return batch_id

    async def find_batches(self, tag: str, *, created_after: datetime, requests: int) -> FoundBatches:
        since = created_after.timestamp()
        jobs = [j for j in self._model.jobs(self._api).values() if j.created_at >= since]
        if self._api == "openai":
            return FoundBatches(ids=tuple(j.id for j in jobs if self._model.tag_of(j.id) == tag), tagged=True)
        return FoundBatches(ids=tuple(j.id for j in jobs if j.total == requests), tagged=False)

    async def retrieve_batch(self, batch_id: str) -> BatchStatus:
        return self._status(self._model.find(self._api, batch_id, poll=True))

    async def batch_results(self, batch_id: str) -> AsyncGenerator[tuple[str, BatchOutcome], None]:
        job = self._model.find(self._api, batch_id, poll=False)
        if job.phase is not Phase.ENDED:
            raise ProviderError(f"batch {batch_id} has not ended yet", kind=ProviderErrorKind.INVALID_REQUEST)
        if self._api == "anthropic":
            for line in anthropic_api.result_lines(job):
                yield anthropic_wire.parse_result_line(parse_json_line(line))
            return
        status = self._status(job)
        output, errors = openai_api.output_lines(job, unrun_lines=self._model.state.config.openai_unrun_lines)
        seen: set[str] = set()
        for line in (*output, *errors):
            custom_id, outcome = openai_wire.parse_result_line(parse_json_line(line))
            seen.add(custom_id)
            yield custom_id, outcome
        for custom_id in job.custom_ids:
            if custom_id not in seen:
                yield custom_id, openai_wire.missing_outcome(status)

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        job = self._model.find(self._api, batch_id, poll=False)
        self._model.release(batch_id)
        job.cancel(self._model.state.now())
        return self._status(job)

    def _answered(self, request: ModelRequest) -> dict[str, Any]:
        result = self._model.run(self._api, None, request, batch_id=None)
        if not result.ok:
            raise _provider_error(self._api, result)
        return result.body

    def _status(self, job: BatchJob) -> BatchStatus:
        if self._api == "anthropic":
            return anthropic_wire.parse_batch(anthropic_api.batch_json(job))
        return openai_wire.parse_batch(openai_api.batch_json(job, self._model.state.now()))

    def _check_size(self, requests: Mapping[str, bytes], max_bytes: int | None) -> None:
        """Refuse a body over the limits as the real client does, before anything is answered."""
        info = anthropic_info.INFO if self._api == "anthropic" else openai_info.INFO
        with SpooledBody() as body:
            for custom_id, entry in requests.items():
                body.write_request(custom_id, entry + b",")
            body.check_size(info.max_batch_bytes, what=f"the batch of {len(requests)} requests", split_above=max_bytes)


def _wire_body(api: Api, request: ModelRequest) -> dict[str, Any]:
    if api == "anthropic":
        return anthropic_wire.build_request(request)
    return openai_wire.build_request(request)


def _response(api: Api, body: Mapping[str, Any]) -> ModelResponse:
    return anthropic_wire.parse_message(body) if api == "anthropic" else openai_wire.parse_completion(body)


def _provider_error(api: Api, result: RequestResult) -> ProviderError:
    if api == "anthropic":
        kind = kind_of(result.body.get("type"), result.status)
        message = str(result.body.get("message"))
    else:
        kind = kind_for_status(result.status)
        message = str((result.body.get("error") or {}).get("message"))
    return ProviderError(f"{api} returned {result.status} {kind}: {message}", kind=kind, retryable=is_retryable(kind))


def _set_usage(api: Api, body: dict[str, Any], usage: Usage) -> None:
    """Report ``usage`` for an answer, in the API's own terms."""
    if api == "anthropic":
        body["usage"].update(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_tokens,
            cache_creation_input_tokens=usage.cache_write_tokens,
            cache_creation={
                "ephemeral_5m_input_tokens": usage.cache_write_5m_tokens,
                "ephemeral_1h_input_tokens": usage.cache_write_1h_tokens,
            },
        )
        return
    body["usage"].update(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.prompt_tokens + usage.output_tokens,
        prompt_tokens_details={
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
    )


def _sse_data(events: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON data of each server-sent event (OpenAI's ``[DONE]`` left out)."""
    for event in events:
        for line in event.decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line.removeprefix("data: "))
