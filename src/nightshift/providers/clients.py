"""Client wiring: authenticated SDK clients from the environment, and the set of providers.

Keys and base URLs are the SDKs' own variables (``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``,
``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``). A client is built when a provider is first needed, so a
missing key fails that call with a ``ProviderError`` naming the variable, never the import or the
startup of a server that does not use that provider. The SDKs themselves are imported then too
(they take seconds to import): ``preload`` imports them ahead, off the event loop, so a server is
up before they are and its first step does not wait for them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from nightshift.domain.agents import Provider
from nightshift.errors import ProviderError
from nightshift.providers.base import ModelProvider
from nightshift.providers.errors import AUTHENTICATION

if TYPE_CHECKING:
    import anthropic
    import openai

DEFAULT_MAX_RETRIES = 2
# Where each provider's SDK sends requests: its base-URL variable, else the real API.
BASE_URLS = {
    Provider.ANTHROPIC: ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    Provider.OPENAI: ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
}


def _key(variable: str, provider: str, base_url_variable: str) -> str:
    key = os.environ.get(variable, "").strip()
    if not key:
        raise ProviderError(
            f"{variable} is not set: export it to call {provider} "
            f"(with {base_url_variable} pointing at `nightshift emulator` for a local run)",
            kind=AUTHENTICATION,
        )
    return key


def anthropic_client(*, max_retries: int = DEFAULT_MAX_RETRIES) -> anthropic.AsyncAnthropic:
    """An ``AsyncAnthropic`` from ``ANTHROPIC_API_KEY`` (required) and ``ANTHROPIC_BASE_URL``.

    Raises:
        ProviderError: ``ANTHROPIC_API_KEY`` is not set.
    """
    import anthropic

    key = _key("ANTHROPIC_API_KEY", "Anthropic", "ANTHROPIC_BASE_URL")
    return anthropic.AsyncAnthropic(api_key=key, max_retries=max_retries)


def openai_client(*, max_retries: int = DEFAULT_MAX_RETRIES) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` from ``OPENAI_API_KEY`` (required) and ``OPENAI_BASE_URL``.

    Raises:
        ProviderError: ``OPENAI_API_KEY`` is not set.
    """
    import openai

    key = _key("OPENAI_API_KEY", "OpenAI", "OPENAI_BASE_URL")
    return openai.AsyncOpenAI(api_key=key, max_retries=max_retries)


_MODULES = ("nightshift.providers.anthropic_provider", "nightshift.providers.openai_provider")


def preload() -> None:
    """Import the providers' modules and SDKs now (blocking: run it in a thread)."""
    for name in _MODULES:
        importlib.import_module(name)


class ProviderSet:
    """The providers of one process: each built on first use, all closed together.

    Use as ``async with ProviderSet() as providers: providers.get(Provider.ANTHROPIC)``.
    ``overrides`` replaces the real provider for some names (e.g. a scripted one in a test).
    """

    def __init__(
        self,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        overrides: Mapping[Provider, ModelProvider] | None = None,
    ) -> None:
        self._max_retries = max_retries
        self._providers: dict[Provider, ModelProvider] = dict(overrides or {})
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def endpoint(self, provider: Provider) -> str:
        """The base URL requests to ``provider`` go to (as its SDK reads it from the environment)."""
        variable, default = BASE_URLS[provider]
        return (os.environ.get(variable) or default).rstrip("/")

    def endpoints(self) -> dict[Provider, str]:
        """Every provider's base URL: a provider batch is only taken by a worker that reaches its own."""
        return {provider: self.endpoint(provider) for provider in BASE_URLS}

    def get(self, provider: Provider) -> ModelProvider:
        """The provider for ``provider``, building its SDK client the first time.

        Raises:
            ProviderError: The provider's API key variable is not set.
        """
        found = self._providers.get(provider)
        if found is not None:
            return found
        built: ModelProvider
        if provider is Provider.ANTHROPIC:
            from nightshift.providers.anthropic_provider import AnthropicProvider

            anthropic_sdk = anthropic_client(max_retries=self._max_retries)
            self._closers.append(anthropic_sdk.close)
            built = AnthropicProvider(anthropic_sdk)
        else:
            from nightshift.providers.openai_provider import OpenAIProvider

            openai_sdk = openai_client(max_retries=self._max_retries)
            self._closers.append(openai_sdk.close)
            built = OpenAIProvider(openai_sdk)
        self._providers[provider] = built
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
