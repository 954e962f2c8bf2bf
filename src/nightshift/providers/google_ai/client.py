"""``ModelProvider`` over the Gemini API's ``generateContent`` and Batch Mode, through ``google-genai``.

A batch is one model's (an API rule). Its requests go inline in the create call while their JSON
is under the inline limit, else as a JSONL file uploaded through the Files API; its results come
back the same way (inline responses, or a result file read line by line from a temporary file).
The API takes about 20 MB inline, but the SDK turns each inline request and response into its
typed objects and back, which costs about a millisecond of CPU a request, more than the rest of
a step; a file goes up and comes back as our own JSON. So the limit is 1 MB by default (a small
batch saves the upload's round trips), ``NIGHTSHIFT_GEMINI_INLINE_BYTES`` moves it. Our id of the batch
is its display name, by which a batch created before a crash is found again.

The SDK's batch object has no per-request counts, so a running batch shows none; an ended batch's
requests without a result (it expired or was cancelled before they ran) end as the batch did
(``BatchStatus.unanswered``). Translation lives in ``wire``; SDK exceptions become
``ProviderError`` in one place (``_sdk_errors``).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import AsyncGenerator, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

import httpx
import pydantic
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from nightshift.errors import ProviderError, ProviderErrorKind, is_retryable
from nightshift.providers.base import (
    BatchCounts,
    BatchOutcome,
    BatchState,
    BatchStatus,
    FoundBatches,
    ModelRequest,
    ModelResponse,
    OutcomeStatus,
    StreamEnd,
    StreamEvent,
    one_model,
    parse_json_line,
)
from nightshift.providers.errors import kind_for_status, unreachable
from nightshift.providers.google_ai import INFO, wire
from nightshift.providers.registry import Closer, ProviderInfo
from nightshift.providers.spool import SpooledBody

INLINE_VARIABLE: Final = "NIGHTSHIFT_GEMINI_INLINE_BYTES"
INLINE_BYTES: Final = 1_000_000  # see the module docstring; the API's own limit is about 20 MB
API_VERSION: Final = "v1beta"
# A batch not done in 48 hours expires (the API's rule).
BATCH_LIFETIME: Final = timedelta(hours=48)

# The states a job ends in; any other (pending, running, one this SDK does not know yet) is not.
_ENDED: Final = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_EXPIRED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
    }
)
_UNANSWERED: Final = {
    "JOB_STATE_EXPIRED": OutcomeStatus.EXPIRED,
    "JOB_STATE_CANCELLED": OutcomeStatus.CANCELED,
}


def connect(info: ProviderInfo, *, max_retries: int) -> tuple[GeminiProvider, Closer]:
    """A ``GeminiProvider`` over a ``genai.Client`` from the environment, and its closer.

    The API version is pinned: Batch Mode is served under ``v1beta`` (the SDK's default moves).
    The SDK is given an httpx client of ours, so that it never picks another HTTP library that
    happens to be installed (its errors would then be other exceptions).

    Raises:
        ProviderError: ``GEMINI_API_KEY`` is not set.
    """
    http = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0))
    retry = types.HttpRetryOptions(attempts=max_retries + 1) if max_retries else None
    options = types.HttpOptions(
        base_url=info.endpoint(), api_version=API_VERSION, retry_options=retry, httpx_async_client=http
    )
    sdk = genai.Client(api_key=info.api_key(), http_options=options)
    inline = int(os.environ.get(INLINE_VARIABLE) or INLINE_BYTES)

    async def close() -> None:
        await sdk.aio.aclose()
        await http.aclose()

    return GeminiProvider(sdk.aio, inline_bytes=inline), close


class GeminiProvider:
    """The Gemini API as a ``ModelProvider``."""

    def __init__(self, client: genai.client.AsyncClient, *, inline_bytes: int = INLINE_BYTES) -> None:
        self._client = client
        self._inline_bytes = inline_bytes

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one request through ``models/{model}:generateContent``."""
        arguments = wire.sdk_arguments(wire.checked_request(request))
        with _sdk_errors():
            response = await self._client.models.generate_content(model=request.model, **arguments)
        return wire.parse_response(_json(response))

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Run one request through ``streamGenerateContent``, piece by piece."""
        arguments = wire.sdk_arguments(wire.checked_request(request))
        assembler = wire.StreamAssembler()
        with _sdk_errors():
            chunks = await self._client.models.generate_content_stream(model=request.model, **arguments)
            async for chunk in chunks:
                for delta in assembler.feed(_json(chunk)):
                    yield delta
        yield StreamEnd(response=assembler.response())

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        return wire.batch_entry(custom_id, request)

    async def submit_batch(
        self, requests: Mapping[str, bytes], *, model: str | None, tag: str, max_bytes: int | None = None
    ) -> str:
        """Create the batch (inline, or from an uploaded JSONL file), ``tag`` as its display name;
        returns its ``batches/...`` name."""
        model = one_model(requests, model, provider="Gemini")
        with SpooledBody() as data:
            for custom_id, entry in requests.items():
                data.write_request(custom_id, entry + b"\n")
            data.check_size(
                INFO.max_batch_bytes, what=f"the input file of {len(requests)} requests", split_above=max_bytes
            )
            config = types.CreateBatchJobConfig(display_name=tag)
            source: Any
            if data.size <= self._inline_bytes:
                source = [_inline(parse_json_line(line)) for line in data.as_file() if line.strip()]
            else:
                upload = types.UploadFileConfig(mime_type="application/jsonl", display_name=f"{tag}.jsonl")
                with _sdk_errors():
                    file = await self._client.files.upload(file=cast(io.IOBase, data.as_file()), config=upload)
                source = file.name
            with _sdk_errors():
                job = await self._client.batches.create(model=model, src=source, config=config)
        return str(job.name)

    async def find_batches(self, tag: str, *, created_after: datetime, requests: int) -> FoundBatches:
        """The batches created since ``created_after`` whose display name is ``tag``, oldest first.

        Every page is read: the API does not say in which order it lists batches, and this runs
        only to recover from a submission whose answer was lost.
        """
        found: list[tuple[datetime, str]] = []
        with _sdk_errors():
            async for job in await self._client.batches.list(config=types.ListBatchJobsConfig(page_size=100)):
                created = job.create_time
                if job.display_name == tag and job.name and created is not None and created >= created_after:
                    found.append((created, job.name))
        return FoundBatches(ids=tuple(name for _, name in sorted(found)), tagged=True)

    async def retrieve_batch(self, batch_id: str) -> BatchStatus:
        """The batch's state (the SDK gives no per-request counts: see the module docstring)."""
        return _status(await self._job(batch_id))

    async def batch_results(self, batch_id: str) -> AsyncGenerator[tuple[str, BatchOutcome], None]:
        """Stream the results of an ended batch: its inline responses, or its result file's lines."""
        job = await self._job(batch_id)
        status = _status(job)
        if status.state is not BatchState.ENDED:
            raise ProviderError(
                f"batch {batch_id} has no results yet: it is {status.provider_status}",
                kind=ProviderErrorKind.INVALID_REQUEST,
            )
        dest = job.dest
        if dest is None:
            return
        if dest.file_name:
            with tempfile.TemporaryFile(prefix="nightshift-gemini-") as results:
                with _sdk_errors():
                    await self._client.files.download(file=dest.file_name, destination=results)
                results.seek(0)
                for line in results:
                    if line.strip():
                        parsed = parse_json_line(line)
                        yield wire.parse_result(str(parsed.get("key")), parsed)
            return
        for inline in dest.inlined_responses or []:
            key = (inline.metadata or {}).get("key")
            if key is not None:
                yield wire.parse_result(str(key), _json(inline))

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        """Ask Gemini to cancel the batch; returns its state as it is then."""
        with _sdk_errors():
            await self._client.batches.cancel(name=batch_id)
        return _status(await self._job(batch_id))

    async def _job(self, batch_id: str) -> types.BatchJob:
        with _sdk_errors():
            return await self._client.batches.get(name=batch_id)


def _inline(line: Mapping[str, Any]) -> dict[str, Any]:
    """A line of the input file as the SDK's inline request (its key in ``metadata``)."""
    return {**wire.sdk_arguments(line["request"]), "metadata": {"key": line["key"]}}


def _json(value: pydantic.BaseModel) -> dict[str, Any]:
    """An SDK object as the REST API's JSON (camelCase), which ``wire`` reads."""
    dumped: dict[str, Any] = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _status(job: types.BatchJob) -> BatchStatus:
    state_name = job.state.value if job.state is not None else "JOB_STATE_UNSPECIFIED"
    if state_name in _ENDED:
        state = BatchState.ENDED
    else:
        state = BatchState.CANCELING if state_name == "JOB_STATE_CANCELLING" else BatchState.IN_PROGRESS
    created = job.create_time or datetime.now(UTC)
    failed = state_name == "JOB_STATE_FAILED"
    return BatchStatus(
        id=str(job.name),
        state=state,
        counts=BatchCounts(),
        provider_status=state_name.removeprefix("JOB_STATE_").lower(),
        created_at=created,
        expires_at=created + BATCH_LIFETIME,
        ended_at=(job.end_time or job.update_time) if state is BatchState.ENDED else None,
        error=(job.error.message if job.error and job.error.message else "the provider failed the batch")
        if failed
        else None,
        unanswered=_UNANSWERED.get(state_name, OutcomeStatus.ERRORED),
    )


@contextmanager
def _sdk_errors() -> Iterator[None]:
    """Turn any exception of the SDK (or of its HTTP client) raised in the block into a ``ProviderError``."""
    try:
        yield
    except genai_errors.APIError as exc:
        # Google answers a wrong key with 400, saying so only in the error's details.
        kind = ProviderErrorKind.AUTHENTICATION if "API_KEY_INVALID" in str(exc.details) else kind_for_status(exc.code)
        raise ProviderError(
            f"Gemini returned {exc.code} {kind}: {exc.message or exc.status}", kind=kind, retryable=is_retryable(kind)
        ) from exc
    except httpx.TimeoutException as exc:
        message = unreachable("Gemini", _request_of(exc), exc, timed_out=True)
        raise ProviderError(message, kind=ProviderErrorKind.TIMEOUT, retryable=True) from exc
    except httpx.TransportError as exc:
        message = unreachable("Gemini", _request_of(exc), exc)
        raise ProviderError(message, kind=ProviderErrorKind.CONNECTION, retryable=True) from exc
    except (ValueError, TypeError) as exc:
        # The SDK checks what it is given before it sends it (and raises these): a bug of ours.
        raise ProviderError(f"Gemini client error: {exc}", kind=ProviderErrorKind.API_ERROR) from exc


def _request_of(exc: httpx.TransportError) -> httpx.Request | None:
    try:
        return exc.request
    except RuntimeError:  # raised before a request was made
        return None
