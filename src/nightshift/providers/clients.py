"""The providers of one process: each built from its registered ``ProviderInfo`` on first use.

Keys and base URLs are the SDKs' own variables (``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``,
``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``). A client is built when a provider is first needed, so a
missing key fails that call with a ``ProviderError`` naming the variable, never the import or the
startup of a server that does not use that provider. The SDKs themselves are imported then too
(they take seconds to import): ``preload`` imports them ahead, off the event loop, so a server is
up before they are and its first step does not wait for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import TracebackType

from nightshift.errors import InvalidInput, ProviderError, ProviderErrorKind
from nightshift.metrics import Metrics
from nightshift.providers.base import ModelProvider
from nightshift.providers.metered import MeteredProvider
from nightshift.providers.registry import Closer, provider_info, providers

DEFAULT_MAX_RETRIES = 2


def preload() -> None:
    """Import every provider's client and SDK now (blocking: run it in a thread)."""
    for info in providers():
        importlib.import_module(info.client)


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
        self._closers: list[Closer] = []

    def endpoints(self) -> dict[str, str]:
        """Every provider's base URL: a provider batch is only taken by a worker that reaches its own."""
        return {info.name: info.endpoint() for info in providers()}

    def get(self, name: str) -> ModelProvider:
        """The provider of this name, building its SDK client the first time.

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
        built, close = info.connect(max_retries=self._max_retries)
        self._closers.append(close)
        if self._metrics is not None:
            built = MeteredProvider(name, built, self._metrics)
        self._providers[name] = built
        return built

    async def aclose(self) -> None:
        """Close every SDK client built so far."""
        closers, self._closers = self._closers, []
        self._providers.clear()
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
