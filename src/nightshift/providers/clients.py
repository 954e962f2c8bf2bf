"""The providers of one process: each built from its registered ``ProviderInfo`` on first use.

Keys and base URLs are the variables each provider names (``ANTHROPIC_API_KEY`` /
``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``, ``GEMINI_API_KEY`` /
``GEMINI_BASE_URL``). A provider is looked up when it is first needed, so a
missing key fails that call with a ``ProviderError`` naming the variable, never the import or the
startup of a server that does not use that provider. Its SDK (heavy to import: it defines every
type of the provider's API) is imported at the provider's first call, on a thread so that the
event loop goes on answering meanwhile: a process that never calls a provider (a command, a server
that only reads, the API side of ``serve`` whose batches go through its poller) never pays for it.
A poller, whose work is calling them, builds the providers whose keys are set as it starts
(``ProviderSet.warm``): a new server's first run does not wait for an import.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncGenerator, Mapping
from datetime import datetime
from types import TracebackType

from nightshift.errors import InvalidInput, ProviderError, ProviderErrorKind
from nightshift.metrics import Metrics
from nightshift.providers.base import (
    BatchOutcome,
    BatchStatus,
    FoundBatches,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamEvent,
)
from nightshift.providers.metered import MeteredProvider
from nightshift.providers.registry import Closer, ProviderInfo, provider_info, providers

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 2
# The module of anyio's asyncio backend, which it imports when first used in a running loop.
ANYIO_ASYNCIO = "anyio._backends._asyncio"


class ProviderSet:
    """The providers of one process, each built on first use, all closed together.

    Use as ``async with ProviderSet() as providers: providers.get("anthropic")``.
    ``overrides`` replaces the real provider for some names (e.g. a scripted one in a test). With
    ``metrics``, the providers it builds count their failed calls there.
    """

    def __init__(
        self,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        overrides: Mapping[str, ModelProvider] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._max_retries = max_retries
        self._metrics = metrics
        self._providers: dict[str, ModelProvider] = dict(overrides or {})
        self._first_calls: dict[str, _OnFirstCall] = {}
        self._closers: list[Closer] = []

    def endpoints(self) -> dict[str, str]:
        """Every provider's base URL: a provider batch is only taken by a worker that reaches its own."""
        return {info.name: info.endpoint() for info in providers()}

    def get(self, name: str) -> ModelProvider:
        """The provider of this name; its SDK client is built at its first call (see ``_OnFirstCall``).

        Raises:
            ProviderError: Its API key variable is not set, or no provider has this name.
        """
        found = self._providers.get(name)
        if found is not None:
            return found
        try:
            info = provider_info(name)
        except InvalidInput as exc:
            raise ProviderError(exc.message, kind=ProviderErrorKind.INVALID_REQUEST) from exc
        info.api_key()  # a missing key is refused here, as when the client was built at once
        first_call = _OnFirstCall(info, max_retries=self._max_retries, closers=self._closers)
        self._first_calls[info.name] = first_call
        built: ModelProvider = first_call if self._metrics is None else MeteredProvider(name, first_call, self._metrics)
        self._providers[name] = built
        return built

    async def warm(self) -> None:
        """Build now each provider whose API key is set, as its first call would: a poller's first
        run would otherwise wait for its SDK's import (about a second), and for the asyncio
        backend of anyio, which the SDKs' HTTP client loads at its first request (tens of
        milliseconds). A provider that cannot be built is left for its first call, which says why."""
        built = False
        for info in providers():
            if not info.has_key():
                continue
            self.get(info.name)
            first_call = self._first_calls.get(info.name)  # (None for an override: nothing to build)
            try:
                if first_call is not None:
                    await first_call.built()
                    built = True
            except Exception:
                log.warning("provider %s could not be built ahead of its first call", info.name, exc_info=True)
        if built:
            try:
                await asyncio.to_thread(importlib.import_module, ANYIO_ASYNCIO)
            except ImportError:  # another anyio: its first request loads what it needs
                log.debug("anyio's asyncio backend is not %s", ANYIO_ASYNCIO)

    async def aclose(self) -> None:
        """Close every SDK client built so far."""
        closers, self._closers = self._closers, []
        self._providers.clear()
        self._first_calls.clear()
        for close in closers:
            await close()

    async def __aenter__(self) -> ProviderSet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _OnFirstCall:
    """A :class:`~nightshift.providers.base.ModelProvider` whose SDK client is built at its first
    call: the SDK is imported on a thread (the event loop answers meanwhile), then every call goes
    to the client built once. Its closer joins ``closers`` when it is built."""

    def __init__(self, info: ProviderInfo, *, max_retries: int, closers: list[Closer]) -> None:
        self._info = info
        self._max_retries = max_retries
        self._closers = closers
        self._built: ModelProvider | None = None
        self._building = asyncio.Lock()

    async def built(self) -> ModelProvider:
        """The provider over its SDK client, built at the first call."""
        if self._built is None:
            async with self._building:
                if self._built is None:
                    await asyncio.to_thread(importlib.import_module, self._info.client)
                    built, close = self._info.connect(max_retries=self._max_retries)
                    self._closers.append(close)
                    self._built = built
        return self._built

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await (await self.built()).complete(request)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        provider = await self.built()
        async with contextlib.aclosing(provider.stream(request)) as events:
            async for event in events:
                yield event

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        return self._info.encode_request(custom_id, request)  # no client needed

    async def submit_batch(
        self, requests: Mapping[str, bytes], *, model: str | None, tag: str, max_bytes: int | None = None
    ) -> str:
        return await (await self.built()).submit_batch(requests, model=model, tag=tag, max_bytes=max_bytes)

    async def find_batches(self, tag: str, *, created_after: datetime, requests: int) -> FoundBatches:
        return await (await self.built()).find_batches(tag, created_after=created_after, requests=requests)

    async def retrieve_batch(self, batch_id: str) -> BatchStatus:
        return await (await self.built()).retrieve_batch(batch_id)

    async def batch_results(self, batch_id: str) -> AsyncGenerator[tuple[str, BatchOutcome], None]:
        provider = await self.built()
        async with contextlib.aclosing(provider.batch_results(batch_id)) as results:
            async for pair in results:
                yield pair

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        return await (await self.built()).cancel_batch(batch_id)
