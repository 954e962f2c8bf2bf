"""What answers cost in USD, summed the same way for an item, a provider batch, a run and an organization."""

from __future__ import annotations

from dataclasses import dataclass

from nightshift.domain.fast_init import fast_init


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Costs:
    """What some answers cost in USD: as billed, the same tokens through the normal API, what
    the prompt cache saved (the cached tokens at the plain input price minus what reading and
    writing them cost; negative when writes cost more than they saved), and what the requests
    taken over for a deadline cost above the batch price (part of ``usd``)."""

    usd: float = 0.0
    without_batch_usd: float = 0.0
    cache_savings_usd: float = 0.0
    takeover_usd: float = 0.0

    def __add__(self, other: Costs) -> Costs:
        return Costs(
            usd=self.usd + other.usd,
            without_batch_usd=self.without_batch_usd + other.without_batch_usd,
            cache_savings_usd=self.cache_savings_usd + other.cache_savings_usd,
            takeover_usd=self.takeover_usd + other.takeover_usd,
        )
