"""A provider whose failed calls are counted in the process's metrics."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterator, Mapping
from datetime import datetime

from nightshift.errors import ProviderError
from nightshift.metrics import ErrorScope, Metrics
from nightshift.providers.base import (
    BatchOutcome,
    BatchStatus,
    FoundBatches,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamEvent,
)
from nightshift.providers.spool import BatchTooLarge


class MeteredProvider:
    """A :class:`~nightshift.providers.base.ModelProvider` that counts every ``ProviderError`` its
    calls raise in ``metrics``, by kind (``nightshift_provider_errors_total{scope="call"}``), and
    raises it on."""

    def __init__(self, name: str, inner: ModelProvider, metrics: Metrics) -> None:
        self._name = name
        self._inner = inner
        self._metrics = metrics

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        try:
            yield
        except BatchTooLarge:
            raise  # nothing failed: the batch is cut into parts (``batch.submission``)
        except ProviderError as exc:
            self._metrics.provider_error(self._name, exc.kind, ErrorScope.CALL)
            raise

    async def complete(self, request: ModelRequest) -> ModelResponse:
        with self._counted():
            return await self._inner.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        with self._counted():
            async with contextlib.aclosing(self._inner.stream(request)) as events:
                async for event in events:
                    yield event

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        return self._inner.encode_request(custom_id, request)  # no call: a refusal fails its agent alone

    async def submit_batch(
        self, requests: Mapping[str, bytes], *, model: str | None, tag: str, max_bytes: int | None = None
    ) -> str:
        with self._counted():
            return await self._inner.submit_batch(requests, model=model, tag=tag, max_bytes=max_bytes)

    async def find_batches(self, tag: str, *, created_after: datetime, requests: int) -> FoundBatches:
        with self._counted():
            return await self._inner.find_batches(tag, created_after=created_after, requests=requests)

    async def retrieve_batch(self, batch_id: str) -> BatchStatus:
        with self._counted():
            return await self._inner.retrieve_batch(batch_id)

    async def batch_results(self, batch_id: str) -> AsyncGenerator[tuple[str, BatchOutcome], None]:
        with self._counted():
            async with contextlib.aclosing(self._inner.batch_results(batch_id)) as results:
                async for pair in results:
                    yield pair

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        with self._counted():
            return await self._inner.cancel_batch(batch_id)
