"""The price table: prefixes, overrides and the batch discount."""

from __future__ import annotations

import pytest

from nightshift.pricing import PriceTable

USAGE = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_write_tokens": 0, "cache_read_tokens": 0}


def test_known_model_by_prefix_and_batch_half_price() -> None:
    table = PriceTable()
    normal = table.cost("anthropic/claude-3-5-haiku-20241022", USAGE, batch=False)
    assert normal is not None
    assert normal == pytest.approx(0.80 + 0.40)
    assert table.cost("anthropic/claude-3-5-haiku-20241022", USAGE, batch=True) == pytest.approx(normal / 2)


def test_longest_prefix_wins() -> None:
    table = PriceTable()
    assert table.price("openai/gpt-4o-mini-2024-07-18") == table.price("openai/gpt-4o-mini")
    assert table.price("openai/gpt-4o-2024-08-06") != table.price("openai/gpt-4o-mini")


def test_cached_tokens_are_priced_apart() -> None:
    cached = {"input_tokens": 0, "output_tokens": 0, "cache_write_tokens": 1_000_000, "cache_read_tokens": 1_000_000}
    assert PriceTable().cost("anthropic/claude-sonnet-4-20250514", cached, batch=False) == pytest.approx(3.75 + 0.30)


def test_overrides_and_unknown_models() -> None:
    table = PriceTable({"openai/my-model": {"input": 1, "output": 2, "cache_write": 0, "cache_read": 0}})
    assert table.cost("openai/my-model", USAGE, batch=False) == pytest.approx(1.2)
    assert table.cost("openai/unknown", USAGE, batch=True) is None
