"""What tokens cost: a per-model price table (USD per million tokens) that settings can override.

Batch APIs bill every kind of token at half the normal price, so a run reports both what it
cost and what the same work would have cost through the normal API.
"""

from __future__ import annotations

from collections.abc import Mapping

from nightshift.providers.registry import Price, providers

BATCH_DISCOUNT = 0.5


def default_prices() -> dict[str, Price]:
    """Every registered provider's list prices, keyed ``provider/model`` (or ``provider/prefix*``)."""
    return {f"{info.name}/{model}": price for info in providers() for model, price in info.prices.items()}


class PriceTable:
    """Prices by model handle: exact keys first, then the longest matching ``prefix*`` key."""

    def __init__(self, overrides: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._prices = default_prices()
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
