"""What tokens cost: a per-model price table (USD per million tokens) that settings can override.

Batch APIs bill every kind of token at half the normal price, so a run reports both what it
cost and what the same work would have cost through the normal API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BATCH_DISCOUNT = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """Normal-API prices in USD per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float


# Public list prices (normal API). Keys are "provider/model" or a prefix of it ending in "*".
DEFAULT_PRICES: dict[str, Price] = {
    "anthropic/claude-3-5-haiku*": Price(input=0.80, output=4.00, cache_write=1.00, cache_read=0.08),
    "anthropic/claude-3-haiku*": Price(input=0.25, output=1.25, cache_write=0.30, cache_read=0.03),
    "anthropic/claude-haiku-4*": Price(input=1.00, output=5.00, cache_write=1.25, cache_read=0.10),
    "anthropic/claude-3-5-sonnet*": Price(input=3.00, output=15.00, cache_write=3.75, cache_read=0.30),
    "anthropic/claude-3-7-sonnet*": Price(input=3.00, output=15.00, cache_write=3.75, cache_read=0.30),
    "anthropic/claude-sonnet-4*": Price(input=3.00, output=15.00, cache_write=3.75, cache_read=0.30),
    "anthropic/claude-opus-4*": Price(input=15.00, output=75.00, cache_write=18.75, cache_read=1.50),
    "openai/gpt-4o-mini*": Price(input=0.15, output=0.60, cache_write=0.15, cache_read=0.075),
    "openai/gpt-4o*": Price(input=2.50, output=10.00, cache_write=2.50, cache_read=1.25),
    "openai/gpt-4.1-nano*": Price(input=0.10, output=0.40, cache_write=0.10, cache_read=0.025),
    "openai/gpt-4.1-mini*": Price(input=0.40, output=1.60, cache_write=0.40, cache_read=0.10),
    "openai/gpt-4.1*": Price(input=2.00, output=8.00, cache_write=2.00, cache_read=0.50),
}


class PriceTable:
    """Prices by model handle: exact keys first, then the longest matching ``prefix*`` key."""

    def __init__(self, overrides: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._prices = dict(DEFAULT_PRICES)
        for key, values in (overrides or {}).items():
            self._prices[key] = Price(**values)

    def price(self, handle: str) -> Price | None:
        """The price of ``provider/model``, or None when the model is unknown."""
        if handle in self._prices:
            return self._prices[handle]
        prefixes = [k for k in self._prices if k.endswith("*") and handle.startswith(k[:-1])]
        return self._prices[max(prefixes, key=len)] if prefixes else None

    def cost(self, handle: str, usage: Mapping[str, int], *, batch: bool) -> float | None:
        """USD for ``usage`` (input/output/cache_read/cache_write tokens) on ``handle``."""
        price = self.price(handle)
        if price is None:
            return None
        dollars = (
            usage.get("input_tokens", 0) * price.input
            + usage.get("output_tokens", 0) * price.output
            + usage.get("cache_write_tokens", 0) * price.cache_write
            + usage.get("cache_read_tokens", 0) * price.cache_read
        ) / 1_000_000
        return dollars * BATCH_DISCOUNT if batch else dollars
