"""The tokens a model call used: one type from the provider's answer to the run views, summed with ``+``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nightshift.domain.fast_init import fast_init


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens of one call (or the sum of several). ``input_tokens`` excludes the cached tokens
    read or written.

    ``cache_write_5m_tokens`` and ``cache_write_1h_tokens`` split ``cache_write_tokens`` by the
    lifetime they were written with, when the provider says (Anthropic's ``usage.cache_creation``);
    writes it does not attribute were made with the lifetime the request asked for. Usage stored
    before that split was recorded reads back with both at zero: all its writes unattributed.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt: uncached, read from the cache and written to it."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_write_5m_tokens=self.cache_write_5m_tokens + other.cache_write_5m_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )

    def to_json(self) -> dict[str, int]:
        """The usage as stored (on an item, in a batch's summary) and as the API shows it: each
        field by its name (``USAGE_KEYS``)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_write_5m_tokens": self.cache_write_5m_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        """Read stored usage; a key it lacks (stored before the key existed) counts zero."""
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            cache_read_tokens=int(data.get("cache_read_tokens", 0)),
            cache_write_tokens=int(data.get("cache_write_tokens", 0)),
            cache_write_5m_tokens=int(data.get("cache_write_5m_tokens", 0)),
            cache_write_1h_tokens=int(data.get("cache_write_1h_tokens", 0)),
        )


# The keys of stored usage (``Usage.to_json``), which the run views sum in SQL.
USAGE_KEYS = tuple(Usage().to_json())
