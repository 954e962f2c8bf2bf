"""``ModelProvider`` over Anthropic's Messages and Message Batches APIs, through the official SDK.

Translation lives in ``wire``; this module only calls the SDK client it is given and turns SDK
exceptions into ``ProviderError`` (in one place, ``_sdk_errors``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime

import anthropic
from anthropic.types.messages import MessageBatch

from nightshift.errors import ProviderError, ProviderErrorKind, is_retryable
from nightshift.providers.anthropic import INFO, wire
from nightshift.providers.base import (
    BatchOutcome,
    BatchStatus,
    FoundBatches,
    ModelRequest,
    ModelResponse,
    StreamEnd,
    StreamEvent,
    parse_json_line,
)
from nightshift.providers.errors import kind_of, unreachable
from nightshift.providers.registry import Closer, ProviderInfo
from nightshift.providers.spool import SpooledBody


def connect(info: ProviderInfo, *, max_retries: int) -> tuple[AnthropicProvider, Closer]:
    """An ``AnthropicProvider`` over an ``AsyncAnthropic`` from the environment, and its closer.

    Raises:
        ProviderError: ``ANTHROPIC_API_KEY`` is not set.
    """
    sdk = anthropic.AsyncAnthropic(api_key=info.api_key(), max_retries=max_retries)
    return AnthropicProvider(sdk), sdk.close


class AnthropicProvider:
    """Anthropic as a ``ModelProvider``; each request's cache breakpoints are its own ``cache`` plan."""

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self._client = client

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one request through ``POST /v1/messages``."""
        params = wire.build_request(request)
        try:
            with _sdk_errors():
                message = await self._client.messages.create(**params)
        except ValueError as exc:
            # The SDK refuses, before sending, a non-streaming call whose max_tokens could take longer
            # than ten minutes; batches have no such limit.
            raise ProviderError(
                f"Anthropic client refused the request: {exc}", kind=ProviderErrorKind.INVALID_REQUEST
            ) from exc
        return wire.parse_message(message.to_dict(mode="json", warnings=False))

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Run one request through ``POST /v1/messages`` with ``stream: true``, piece by piece."""
        params = wire.build_request(request)
        assembler = wire.StreamAssembler()
        with _sdk_errors():
            events = await self._client.messages.create(**params, stream=True)
            async with events:
                async for event in events:
                    for delta in assembler.feed(event.to_dict(mode="json", warnings=False)):
                        yield delta
        yield StreamEnd(response=assembler.response())

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        return wire.batch_entry(custom_id, request)

    async def submit_batch(
        self, requests: Mapping[str, bytes], *, model: str | None, tag: str, max_bytes: int | None = None
    ) -> str:
        """Create a Message Batch with one request per custom_id (of any models); returns its
        ``msgbatch_...`` id.

        Message Batches keep no metadata: ``tag`` is not sent (``find_batches`` matches by count).
        """
        if not requests:
            raise ProviderError("a batch needs at least one request", kind=ProviderErrorKind.INVALID_REQUEST)
        # The body is spooled to a file (see ``spool``) and goes out through the SDK client (auth,
        # retries, errors as usual) instead of ``batches.create``, which deep-copies every request
        # first and costs as much as everything else of a submit at 10,000 agents.
        with SpooledBody() as body:
            body.write(b'{"requests":[')
            for index, (custom_id, entry) in enumerate(requests.items()):
                if index:
                    body.write_request(custom_id, b",")
                body.write_request(custom_id, entry)
            body.write(b"]}")
            body.check_size(INFO.max_batch_bytes, what=f"the batch of {len(requests)} requests", split_above=max_bytes)
            with _sdk_errors():
                batch = await self._client.post(
                    "/v1/messages/batches",
                    content=body,
                    cast_to=MessageBatch,
                    options={"headers": {"content-type": "application/json", "content-length": str(body.size)}},
                )
        return batch.id

    async def find_batches(self, tag: str, *, created_after: datetime, requests: int) -> FoundBatches:
        """The batches created since ``created_after`` holding ``requests`` requests, oldest first.

        Anthropic keeps no metadata on a batch, so the count (and the time) is all there is to go
        by; the caller leaves out batches it already knows.
        """
        found: list[str] = []
        with _sdk_errors():
            async for batch in self._client.messages.batches.list(limit=100):
                if batch.created_at < created_after:
                    break  # newest first: the rest are older
                counts = batch.request_counts
                total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
                if total == requests:
                    found.append(batch.id)
        return FoundBatches(ids=tuple(reversed(found)), tagged=False)

    async def retrieve_batch(self, batch_id: str) -> BatchStatus:
        """Retrieve the batch and its request counts."""
        with _sdk_errors():
            batch = await self._client.messages.batches.retrieve(batch_id)
        return wire.parse_batch(batch.to_dict(mode="json", warnings=False))

    async def batch_results(self, batch_id: str) -> AsyncGenerator[tuple[str, BatchOutcome], None]:
        """Stream the results JSONL of an ended batch, one parsed line at a time."""
        with _sdk_errors():
            async with self._client.messages.batches.with_streaming_response.results(batch_id) as response:
                async for line in response.iter_lines():
                    if line.strip():
                        yield wire.parse_result_line(parse_json_line(line))

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        """Ask Anthropic to cancel the batch (it goes to ``canceling``, then ends)."""
        with _sdk_errors():
            batch = await self._client.messages.batches.cancel(batch_id)
        return wire.parse_batch(batch.to_dict(mode="json", warnings=False))


@contextmanager
def _sdk_errors() -> Iterator[None]:
    """Turn any exception of the SDK raised in the block into a ``ProviderError``."""
    try:
        yield
    except anthropic.AnthropicError as exc:
        raise provider_error(exc) from exc


def provider_error(exc: anthropic.AnthropicError) -> ProviderError:
    """An SDK exception as a ``ProviderError`` whose kind is Anthropic's error type."""
    if isinstance(exc, anthropic.APIStatusError):
        kind = kind_of(exc.type, exc.status_code)
        message = exc.api_message or exc.message
        said = exc.type if isinstance(exc.type, str) and exc.type else kind
        return ProviderError(
            f"Anthropic returned {exc.status_code} {said}: {message}", kind=kind, retryable=is_retryable(kind)
        )
    if isinstance(exc, anthropic.APITimeoutError):
        message = unreachable("Anthropic", exc.request, exc, timed_out=True)
        return ProviderError(message, kind=ProviderErrorKind.TIMEOUT, retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        message = unreachable("Anthropic", exc.request, exc)
        return ProviderError(message, kind=ProviderErrorKind.CONNECTION, retryable=True)
    return ProviderError(f"Anthropic client error: {exc}", kind=ProviderErrorKind.API_ERROR, retryable=False)
