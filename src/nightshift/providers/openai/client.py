"""``ModelProvider`` over OpenAI's Chat Completions and Batch APIs, through the official SDK.

A batch is a JSONL input file uploaded with ``purpose=batch`` and a batch on
``/v1/chat/completions``. Results are the output and error files, read line by line; requests with
no line in either (never run, or a batch refused as a whole) are read back from the input file so
that every submitted custom_id gets an outcome. Translation lives in ``wire``; SDK exceptions become
``ProviderError`` in one place (``_sdk_errors``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import openai

from nightshift.errors import ProviderError, ProviderErrorKind, is_retryable
from nightshift.providers.base import (
    BatchOutcome,
    BatchState,
    BatchStatus,
    FoundBatches,
    ModelRequest,
    ModelResponse,
    StreamEnd,
    StreamEvent,
    one_model,
    parse_json_line,
)
from nightshift.providers.errors import kind_for_status, unreachable
from nightshift.providers.openai import INFO, wire
from nightshift.providers.registry import Closer, ProviderInfo
from nightshift.providers.spool import SpooledBody

# The metadata key that carries our id of a provider batch, to find it again after a crash.
TAG_KEY = "nightshift_batch"


def connect(info: ProviderInfo, *, max_retries: int) -> tuple[OpenAIProvider, Closer]:
    """An ``OpenAIProvider`` over an ``AsyncOpenAI`` from the environment, and its closer.

    Raises:
        ProviderError: ``OPENAI_API_KEY`` is not set.
    """
    sdk = openai.AsyncOpenAI(api_key=info.api_key(), max_retries=max_retries)
    return OpenAIProvider(sdk), sdk.close


class OpenAIProvider:
    """OpenAI as a ``ModelProvider``. A batch holds requests for a single model (an API rule)."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one request through ``POST /v1/chat/completions``."""
        body = wire.build_request(request)
        with _sdk_errors():
            completion = await self._client.chat.completions.create(**body)
        return wire.parse_completion(completion.to_dict(mode="json", warnings=False))

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Run one request through ``POST /v1/chat/completions`` with ``stream: true``, piece by piece.

        ``stream_options.include_usage`` asks for the usage, which comes in a last chunk.
        """
        body = wire.build_request(request)
        assembler = wire.StreamAssembler()
        with _sdk_errors():
            chunks = await self._client.chat.completions.create(
                **body, stream=True, stream_options={"include_usage": True}
            )
            async with chunks:
                async for chunk in chunks:
                    for delta in assembler.feed(chunk.to_dict(mode="json", warnings=False)):
                        yield delta
        yield StreamEnd(response=assembler.response())

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        return wire.batch_entry(custom_id, request)

    async def submit_batch(
        self, requests: Mapping[str, bytes], *, model: str | None, tag: str, max_bytes: int | None = None
    ) -> str:
        """Upload the input file and create the batch, ``tag`` in its metadata; returns its ``batch_...`` id."""
        one_model(requests, model, provider="OpenAI")
        # The input file is spooled to disk (see ``spool``) and uploaded from there, a chunk at a time.
        with SpooledBody() as data:
            for custom_id, entry in requests.items():
                data.write_request(custom_id, entry + b"\n")
            data.check_size(
                INFO.max_batch_bytes, what=f"the input file of {len(requests)} requests", split_above=max_bytes
            )
            with _sdk_errors():
                file = await self._client.files.create(
                    file=("nightshift-batch.jsonl", data.as_file(), "application/jsonl"), purpose="batch"
                )
        with _sdk_errors():
            batch = await self._client.batches.create(
                input_file_id=file.id, endpoint=wire.ENDPOINT, completion_window="24h", metadata={TAG_KEY: tag}
            )
        return batch.id

    async def find_batches(self, tag: str, *, created_after: datetime, requests: int) -> FoundBatches:
        """The batches created since ``created_after`` whose metadata carries ``tag``, oldest first."""
        found: list[str] = []
        since = created_after.timestamp()
        with _sdk_errors():
            async for batch in self._client.batches.list(limit=100):
                if batch.created_at < since:
                    break  # newest first: the rest are older
                if (batch.metadata or {}).get(TAG_KEY) == tag:
                    found.append(batch.id)
        return FoundBatches(ids=tuple(reversed(found)), tagged=True)

    async def retrieve_batch(self, batch_id: str) -> BatchStatus:
        """Retrieve the batch and its request counts."""
        return wire.parse_batch(await self._batch(batch_id))

    async def batch_results(self, batch_id: str) -> AsyncGenerator[tuple[str, BatchOutcome], None]:
        """Stream the output file, then the error file, then the requests that have neither."""
        batch = await self._batch(batch_id)
        status = wire.parse_batch(batch)
        if status.state is not BatchState.ENDED:
            raise ProviderError(
                f"batch {batch_id} has no results yet: it is {status.provider_status}",
                kind=ProviderErrorKind.INVALID_REQUEST,
            )
        seen: set[str] = set()
        for key in ("output_file_id", "error_file_id"):
            file_id = batch.get(key)
            if isinstance(file_id, str) and file_id:
                async for line in self._lines(file_id):
                    custom_id, outcome = wire.parse_result_line(parse_json_line(line))
                    seen.add(custom_id)
                    yield custom_id, outcome
        if status.provider_status == "completed" and len(seen) >= status.counts.total:
            return
        missing = wire.missing_outcome(status)
        async for line in self._lines(str(batch["input_file_id"])):
            try:
                custom_id = parse_json_line(line).get("custom_id")
            except (ValueError, AttributeError):
                continue  # a line the provider refused; it has no request to report
            if isinstance(custom_id, str) and custom_id not in seen:
                seen.add(custom_id)
                yield custom_id, missing

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        """Ask OpenAI to cancel the batch (it goes to ``cancelling``, then ``cancelled``)."""
        with _sdk_errors():
            batch = await self._client.batches.cancel(batch_id)
        return wire.parse_batch(batch.to_dict(mode="json", warnings=False))

    async def _batch(self, batch_id: str) -> dict[str, Any]:
        with _sdk_errors():
            batch = await self._client.batches.retrieve(batch_id)
        return batch.to_dict(mode="json", warnings=False)

    async def _lines(self, file_id: str) -> AsyncIterator[str]:
        with _sdk_errors():
            async with self._client.files.with_streaming_response.content(file_id) as response:
                async for line in response.iter_lines():
                    if line.strip():
                        yield line


@contextmanager
def _sdk_errors() -> Iterator[None]:
    """Turn any exception of the SDK raised in the block into a ``ProviderError``."""
    try:
        yield
    except openai.OpenAIError as exc:
        raise provider_error(exc) from exc


def provider_error(exc: openai.OpenAIError) -> ProviderError:
    """An SDK exception as a ``ProviderError``; the kind follows the HTTP status."""
    if isinstance(exc, openai.APIStatusError):
        kind = kind_for_status(exc.status_code)
        body = exc.body if isinstance(exc.body, dict) else {}
        message = body.get("message") or exc.message
        return ProviderError(
            f"OpenAI returned {exc.status_code} {kind}: {message}", kind=kind, retryable=is_retryable(kind)
        )
    if isinstance(exc, openai.APITimeoutError):
        message = unreachable("OpenAI", exc.request, exc, timed_out=True)
        return ProviderError(message, kind=ProviderErrorKind.TIMEOUT, retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        message = unreachable("OpenAI", exc.request, exc)
        return ProviderError(message, kind=ProviderErrorKind.CONNECTION, retryable=True)
    return ProviderError(f"OpenAI client error: {exc}", kind=ProviderErrorKind.API_ERROR, retryable=False)
