"""The providers nightshift knows: one registered ``ProviderInfo`` each, found by name.

A provider is a package of ``nightshift.providers`` holding three modules: ``__init__`` with its
``INFO`` (the facts below; importing it loads no SDK), ``wire`` (pure translation to and from its
API) and ``client`` (the ``ModelProvider`` over its official SDK, with a ``connect`` function).
Adding one means writing that package and its tests, and naming it in ``_PACKAGES``.

A model is named ``provider/model-name`` (``anthropic/claude-3-5-haiku-20241022``): the prefix
picks the provider, and an unknown prefix is an error that names the known ones.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from nightshift.domain.caching import CacheRates
from nightshift.errors import InvalidInput, ProviderError, ProviderErrorKind

if TYPE_CHECKING:
    from nightshift.providers.base import ModelProvider, ModelRequest

# The provider packages, in the order they are listed to users.
_PACKAGES = ("nightshift.providers.anthropic", "nightshift.providers.openai", "nightshift.providers.google_ai")


Closer = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderInfo:
    """What nightshift knows of one provider.

    Attributes:
        name: The model prefix (``anthropic`` in ``anthropic/claude-...``).
        key_variable: The environment variable its SDK reads the API key from.
        base_url_variable: The variable its SDK reads the base URL from (to use the emulator).
        default_base_url: Where its SDK goes without that variable.
        max_batch_requests: The most requests the provider takes in one batch.
        max_batch_bytes: The largest batch it takes, in bytes of what is uploaded (a request body
            or an input file).
        one_model_per_batch: Whether a batch may hold requests for one model only.
        example_model: A cheap model of it, for the demo and examples.
        cache_rates: What its prompt-cache writes (by lifetime) and reads cost against its input
            price, for a provider whose cache is written where a request marks it: each request
            carries a cache plan (``domain/caching.py``). None: it caches on its own, no write billed.
        encoding: The tiktoken encoding that counts its tokens (None: they are estimated from the
            characters, see ``providers.tokens``).
        client: The module whose ``connect(max_retries)`` builds the provider over its SDK.
        wire: The module whose ``batch_entry(custom_id, request)`` encodes a request for its
            batches: it imports no SDK, so requests are encoded before a client is built.
        price_data_id: The provider's id in the price data, where it is not ``name``.
        model_prefix: What its chat models' names start with, where the price data lists other
            models under its id (Google's lists Vertex's Claude models beside Gemini).
        tool_problem: Why a tool's parameter schema cannot be given to this provider (None: it
            can), for a provider that takes a subset of JSON Schema: a tool is checked when it
            meets an agent of the provider, not when a step is sent.
        aliases: Other names people call it by (``gemini``), taken wherever a provider is named.
        flex_models: What the names of its models with a tier of normal calls billed at batch
            prices start with (OpenAI's ``flex``): a deadline's take-over uses it for them.
        counts_progress: Whether its running batches' request counts move as requests are done
            (a deadline's rule reads the pace from them; Anthropic's move only at the end).
    """

    name: str
    key_variable: str
    base_url_variable: str
    default_base_url: str
    max_batch_requests: int
    max_batch_bytes: int
    one_model_per_batch: bool
    example_model: str
    cache_rates: CacheRates | None
    client: str
    wire: str
    encoding: str | None = None
    price_data_id: str | None = None
    model_prefix: str = ""
    tool_problem: Callable[[Mapping[str, Any] | None], str | None] | None = None
    aliases: tuple[str, ...] = ()
    flex_models: tuple[str, ...] = ()
    counts_progress: bool = True

    @property
    def price_id(self) -> str:
        """Its id in the price data."""
        return self.price_data_id or self.name

    @property
    def example_handle(self) -> str:
        """``provider/model`` of the example model."""
        return f"{self.name}/{self.example_model}"

    def endpoint(self) -> str:
        """The base URL requests go to, as its SDK reads it from the environment."""
        return (os.environ.get(self.base_url_variable) or self.default_base_url).rstrip("/")

    def has_key(self) -> bool:
        """Whether its API key is set (see ``api_key``)."""
        return bool(os.environ.get(self.key_variable, "").strip())

    def api_key(self) -> str:
        """The API key from the environment.

        Raises:
            ProviderError: The variable is not set (the message names it).
        """
        if not self.has_key():
            raise ProviderError(
                f"{self.key_variable} is not set: export it to call {self.name} "
                f"(with {self.base_url_variable} pointing at `nightshift emulator` for a local run)",
                kind=ProviderErrorKind.AUTHENTICATION,
            )
        return os.environ[self.key_variable].strip()

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        """The request as its entry of this provider's batch body (see ``BatchProvider``)."""
        return _batch_entry(self.wire)(custom_id, request)

    def connect(self, *, max_retries: int) -> tuple[ModelProvider, Closer]:
        """The provider over its SDK (imported now, on first use) and what closes its client.

        Raises:
            ProviderError: Its API key is not set.
        """
        module = importlib.import_module(self.client)
        built: tuple[ModelProvider, Closer] = module.connect(self, max_retries=max_retries)
        return built


@cache
def providers() -> tuple[ProviderInfo, ...]:
    """Every known provider, in ``_PACKAGES`` order."""
    return tuple(importlib.import_module(package).INFO for package in _PACKAGES)


def provider_info(name: str) -> ProviderInfo:
    """The provider of this name (or one of its aliases: ``gemini`` is ``google_ai``).

    Raises:
        InvalidInput: No provider has this name (the message names the known ones).
    """
    for info in providers():
        if name == info.name or name in info.aliases:
            return info
    raise InvalidInput(f"unknown provider {name!r}; use one of: {known_names()}", field="model")


def known_names() -> str:
    """The providers' names, for messages: ``anthropic, openai, google_ai``."""
    return ", ".join(info.name for info in providers())


def parse_model(handle: str) -> tuple[ProviderInfo, str]:
    """Split ``provider/model-name`` into the provider and the model's name.

    Raises:
        InvalidInput: Not ``provider/model-name``, or an unknown provider.
    """
    prefix, sep, model = handle.partition("/")
    if not sep or not prefix or not model:
        example = providers()[0].example_handle
        raise InvalidInput(f"model must be 'provider/model-name' (e.g. {example}), got {handle!r}", field="model")
    return provider_info(prefix), model


@cache
def _batch_entry(wire: str) -> Callable[[str, ModelRequest], bytes]:
    encode: Callable[[str, ModelRequest], bytes] = importlib.import_module(wire).batch_entry
    return encode
