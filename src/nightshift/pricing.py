"""What tokens cost: each model's published prices, from the bundled genai-prices data, which
settings can override.

A request is billed by kind of token: plain input, output, cache reads, and cache writes, whose
price depends on the lifetime they were written with (Anthropic: 1.25x the input price for five
minutes, 2x for one hour; reads 0.1x). Batch APIs bill half of the normal prices (genai-prices
gives a model's batch rates where it knows them). For each answer nightshift records three
figures (``Costs``): what it cost, what the same tokens cost through the normal API, and what the
prompt cache saved (the cached tokens at the plain input price, minus what reading and writing
them cost; negative when the writes were not read back enough to pay for themselves).

The price data is the copy shipped in the pinned ``genai-prices`` package, read through a
snapshot of our own: nothing is fetched at run time (its opt-in ``UpdatePrices`` is never
started, and a snapshot another library installs is not used).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import cache
from typing import Final

from genai_prices.data import providers as genai_providers
from genai_prices.data_snapshot import DataSnapshot
from genai_prices.types import ModelInfo, ModelPrice, TieredPrices

from nightshift.domain.costs import Costs
from nightshift.domain.fast_init import fast_init
from nightshift.domain.usage import Usage
from nightshift.providers.base import CacheTtl
from nightshift.providers.registry import ProviderInfo, providers

# Both providers bill every token of a batch at half the normal price (used where the price data
# has no batch rates of its own for a model, and for the settings' overrides).
BATCH_DISCOUNT: Final = 0.5

_BATCH: Final = {"processing": "batch"}


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """Prices in USD per million tokens of one model, for one way of calling it.

    ``cache_write`` is the five-minute write; ``cache_write_1h`` the one-hour write (None: the
    same as ``cache_write``, as for a provider that bills one write price).
    """

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float | None = None

    def write(self, ttl: CacheTtl) -> float:
        """The price of a cache write made with lifetime ``ttl``."""
        if ttl is CacheTtl.ONE_HOUR and self.cache_write_1h is not None:
            return self.cache_write_1h
        return self.cache_write

    def times(self, factor: float) -> Price:
        """Every price multiplied by ``factor``."""
        return Price(
            input=self.input * factor,
            output=self.output * factor,
            cache_write=self.cache_write * factor,
            cache_read=self.cache_read * factor,
            cache_write_1h=None if self.cache_write_1h is None else self.cache_write_1h * factor,
        )


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Tokens:
    """One request's tokens by how they are billed; the cache writes split by lifetime."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0

    @classmethod
    def of(cls, usage: Usage, *, ttl: CacheTtl) -> Tokens:
        """``usage`` by how it is billed; writes the provider did not attribute to a lifetime (and
        every write of usage stored before the split was recorded) were made with ``ttl``, the
        lifetime the request asked for."""
        five, hour = usage.cache_write_5m_tokens, usage.cache_write_1h_tokens
        rest = max(usage.cache_write_tokens - five - hour, 0)
        return cls(
            input=usage.input_tokens,
            output=usage.output_tokens,
            cache_read=usage.cache_read_tokens,
            cache_write_5m=five + (rest if ttl is CacheTtl.FIVE_MINUTES else 0),
            cache_write_1h=hour + (rest if ttl is CacheTtl.ONE_HOUR else 0),
        )

    @property
    def cached(self) -> int:
        """Tokens read from or written to the prompt cache."""
        return self.cache_read + self.cache_write_5m + self.cache_write_1h

    @property
    def prompt(self) -> int:
        """Every input token of the request, cached or not (what long-prompt price tiers go by)."""
        return self.input + self.cached


def dollars(price: Price, tokens: Tokens) -> float:
    """USD for ``tokens`` at ``price``."""
    return (
        tokens.input * price.input
        + tokens.output * price.output
        + tokens.cache_read * price.cache_read
        + tokens.cache_write_5m * price.write(CacheTtl.FIVE_MINUTES)
        + tokens.cache_write_1h * price.write(CacheTtl.ONE_HOUR)
    ) / 1_000_000


def cache_savings(price: Price, tokens: Tokens) -> float:
    """USD the cache saved: the cached tokens at the plain input price, minus their real price."""
    as_input = tokens.cached * price.input
    cached = (
        tokens.cache_read * price.cache_read
        + tokens.cache_write_5m * price.write(CacheTtl.FIVE_MINUTES)
        + tokens.cache_write_1h * price.write(CacheTtl.ONE_HOUR)
    )
    return (as_input - cached) / 1_000_000


class PriceTable:
    """Prices by model handle (``provider/model``): the settings' overrides first (exact keys,
    then the longest matching ``prefix*`` key), then the genai-prices data."""

    def __init__(self, overrides: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._overrides = {key: Price(**values) for key, values in (overrides or {}).items()}

    def price(self, handle: str, *, batch: bool, prompt_tokens: int = 0, on: date | None = None) -> Price | None:
        """The prices of ``handle`` through the batch or the normal API, or None when unknown.

        Args:
            handle: ``provider/model``.
            batch: Batch prices rather than normal-API prices.
            prompt_tokens: The request's input tokens, cached or not: some models bill a long
                prompt at higher prices.
            on: The day of the request (prices change over time); today by default.
        """
        override = self._override(handle)
        if override is not None:
            return override.times(BATCH_DISCOUNT) if batch else override
        prefix, _, model = handle.partition("/")
        info = _providers().get(prefix)
        if info is None or not model.startswith(info.model_prefix):
            return None
        card = _card(info.price_id, model, batch, on or datetime.now(UTC).date())
        return None if card is None else card.at(prompt_tokens)

    def cost(self, handle: str, usage: Usage, *, batch: bool) -> Costs | None:
        """What ``usage`` cost on ``handle``.

        Cache writes the provider did not attribute to a lifetime (usage stored before the split
        was recorded) are priced at the one its requests then asked for: an hour in a batch to a
        provider with a choice of lifetime, else five minutes. None when the model's prices are
        unknown.
        """
        provider = handle.partition("/")[0]
        ttl = CacheTtl.FIVE_MINUTES
        if batch:
            ttl = _batch_ttl(provider) or CacheTtl.FIVE_MINUTES
        tokens = Tokens.of(usage, ttl=ttl)
        today = datetime.now(UTC).date()
        billed = self.price(handle, batch=batch, prompt_tokens=tokens.prompt, on=today)
        normal = self.price(handle, batch=False, prompt_tokens=tokens.prompt, on=today)
        if billed is None or normal is None:
            return None
        return Costs(
            usd=dollars(billed, tokens),
            without_batch_usd=dollars(normal, tokens),
            cache_savings_usd=cache_savings(billed, tokens),
        )

    def _override(self, handle: str) -> Price | None:
        if handle in self._overrides:
            return self._overrides[handle]
        prefixes = [k for k in self._overrides if k.endswith("*") and handle.startswith(k[:-1])]
        return self._overrides[max(prefixes, key=len)] if prefixes else None


def _batch_ttl(provider: str) -> CacheTtl | None:
    info = _providers().get(provider)
    return CacheTtl.ONE_HOUR if info is not None and info.cache_rates is not None else None


@cache
def _providers() -> dict[str, ProviderInfo]:
    return {info.name: info for info in providers()}


@dataclass(frozen=True, slots=True)
class _Rate:
    """One price and the higher ones a longer prompt pays: ``(more than N prompt tokens, price)``."""

    base: float
    tiers: tuple[tuple[int, float], ...] = ()

    def at(self, prompt_tokens: int) -> float:
        # Every token of a prompt past a tier's threshold pays that tier's price (genai-prices'
        # ``TieredPrices``: the "cliff" model the providers use).
        price = self.base
        for start, tier_price in self.tiers:
            if prompt_tokens > start:
                price = tier_price
        return price


@dataclass(frozen=True, slots=True, kw_only=True)
class _Card:
    """A model's prices for one way of calling it, before the prompt's length is known."""

    input: _Rate
    output: _Rate
    cache_write: _Rate
    cache_read: _Rate
    cache_write_1h: _Rate
    factor: float

    def at(self, prompt_tokens: int) -> Price:
        return Price(
            input=self.input.at(prompt_tokens) * self.factor,
            output=self.output.at(prompt_tokens) * self.factor,
            cache_write=self.cache_write.at(prompt_tokens) * self.factor,
            cache_read=self.cache_read.at(prompt_tokens) * self.factor,
            cache_write_1h=self.cache_write_1h.at(prompt_tokens) * self.factor,
        )


@cache
def _snapshot() -> DataSnapshot:
    # Our own snapshot of the bundled data, so that an ``UpdatePrices`` started by another library
    # in the process (which replaces genai-prices' global snapshot) changes nothing here.
    return DataSnapshot(providers=genai_providers, from_auto_update=False)


@cache
def _card(provider: str, model: str, batch: bool, day: date) -> _Card | None:
    try:
        _, info = _snapshot().find_provider_model(model, None, provider, None)
    except LookupError:
        return None
    when = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    # Batch rates where the data has them for this model; half the normal ones where it has not
    # (it lists batch rates for the models the providers' current batch price tables name only).
    own_batch = batch and _has_batch_rates(info, when)
    prices = info.get_prices(when, dict(_BATCH) if own_batch else None)
    plain = _rate(prices, "input_mtok")
    if plain is None:
        return None
    write = _rate(prices, "cache_write_mtok") or plain  # no write price: writes are billed as input
    return _Card(
        input=plain,
        output=_rate(prices, "output_mtok") or _Rate(0.0),
        cache_write=write,
        cache_read=_rate(prices, "cache_read_mtok") or plain,
        cache_write_1h=_rate(prices, "cache_write_1h_mtok") or write,
        factor=BATCH_DISCOUNT if batch and not own_batch else 1.0,
    )


def _has_batch_rates(info: ModelInfo, when: datetime) -> bool:
    return any(
        variant.when == _BATCH and (variant.constraint is None or variant.constraint.active(when))
        for variant in info.price_variants or ()
    )


def _rate(prices: ModelPrice, key: str) -> _Rate | None:
    value: Decimal | TieredPrices | None = getattr(prices, key, None)
    if value is None:
        return None
    if isinstance(value, TieredPrices):
        return _Rate(float(value.base), tuple((tier.start, float(tier.price)) for tier in value.tiers))
    return _Rate(float(value))


# Models of the price data that do not answer chat requests (speech, images, search, embeddings,
# fine-tunes).
_NOT_CHAT: Final = (
    "audio",
    "realtime",
    "transcribe",
    "tts",
    "image",
    "search",
    "computer-use",
    "instruct",
    "embedding",
    ":",
    "ft",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KnownModel:
    """A chat model of a provider that the price data knows, with its context window in tokens."""

    provider: str
    name: str
    context_window: int


def known_models() -> list[KnownModel]:
    """The chat models of every registered provider that the bundled price data lists with a
    context window, in the providers' order, then by name, each provider's example model included."""
    found: list[KnownModel] = []
    for info in providers():
        listed = {
            model.id: model.context_window
            for provider in _snapshot().providers
            if provider.id == info.price_id
            for model in provider.models
            if model.context_window
            and not model.deprecated
            and model.id.startswith(info.model_prefix)
            and not any(word in model.id for word in _NOT_CHAT)
        }
        if info.example_model not in listed:
            _, example = _snapshot().find_provider_model(info.example_model, None, info.price_id, None)
            listed[info.example_model] = example.context_window or 0
        found += [
            KnownModel(provider=info.name, name=name, context_window=window)
            for name, window in sorted(listed.items())
            if window
        ]
    return found


def known_embedding_models() -> list[tuple[str, str]]:
    """``(provider, model)`` of every embedding model of a registered provider in the price data."""
    names = {info.price_id: info.name for info in providers()}
    return sorted(
        (names[provider.id], model.id)
        for provider in _snapshot().providers
        if provider.id in names
        for model in provider.models
        if "embedding" in model.id and not model.deprecated
    )
