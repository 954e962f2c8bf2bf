"""The price table against the providers' published prices, worked out by hand.

Anthropic (platform.claude.com, "Pricing" and "Prompt caching"): a five-minute cache write costs
1.25x the input price, a one-hour write 2x, a cache read 0.1x; the Message Batches API bills all
of them at half. Claude Haiku 4.5: input $1, output $5, 5-minute write $1.25, 1-hour write $2,
read $0.10 per million tokens; in a batch $0.50, $2.50, $0.625, $1 and $0.05.
OpenAI bills no cache write (written tokens are plain input) and reads at a cheaper rate per model.
"""

from __future__ import annotations

import pytest
from genai_prices.data_snapshot import DataSnapshot, get_snapshot, set_custom_snapshot

from nightshift.domain.usage import Usage
from nightshift.pricing import Price, PriceTable, known_models

HAIKU_45 = "anthropic/claude-haiku-4-5-20251001"
HAIKU_35 = "anthropic/claude-3-5-haiku-20241022"


def usage(
    input: int = 0, output: int = 0, read: int = 0, write: int = 0, *, five: int | None = None, hour: int | None = None
) -> Usage:
    """Usage as stored; without ``five``/``hour`` it is usage stored before writes were split by lifetime."""
    found = {"input_tokens": input, "output_tokens": output, "cache_read_tokens": read, "cache_write_tokens": write}
    if five is not None or hour is not None:
        found |= {"cache_write_5m_tokens": five or 0, "cache_write_1h_tokens": hour or 0}
    return Usage.from_json(found)


def test_claude_haiku_4_5_batch_with_one_hour_cache_writes() -> None:
    # 2,000 plain input tokens, 500 output, 10,000 read from the cache, 4,000 written for an hour.
    cost = PriceTable().cost(HAIKU_45, usage(2_000, 500, 10_000, 4_000, hour=4_000), batch=True)
    # Batch: 2,000 x $0.50 + 500 x $2.50 + 10,000 x $0.05 + 4,000 x $1.00 (the 1-hour write)
    #      = $0.001 + $0.00125 + $0.0005 + $0.004 = $0.00675
    #   (at the 5-minute write rate, $0.625, the writes would have come to $0.0025: 37.5% low).
    # Normal API: 2,000 x $1 + 500 x $5 + 10,000 x $0.10 + 4,000 x $2 = $0.0135.
    # Cache savings: the 14,000 cached tokens as batch input, 14,000 x $0.50 = $0.007, minus what
    # the read and the write cost, $0.0005 + $0.004: $0.0025.
    assert cost is not None
    assert (cost.usd, cost.without_batch_usd, cost.cache_savings_usd) == pytest.approx((0.00675, 0.0135, 0.0025))


def test_claude_haiku_4_5_published_rates() -> None:
    table = PriceTable()
    assert table.price(HAIKU_45, batch=False) == Price(
        input=1.0, output=5.0, cache_write=1.25, cache_read=0.10, cache_write_1h=2.0
    )
    assert table.price(HAIKU_45, batch=True) == Price(
        input=0.5, output=2.5, cache_write=0.625, cache_read=0.05, cache_write_1h=1.0
    )


def test_a_model_without_batch_rates_in_the_data_is_billed_half_in_a_batch() -> None:
    # Claude Haiku 3.5: $0.80 input, $4 output, $1 5-minute write, $1.60 1-hour write, $0.08 read.
    table = PriceTable()
    normal = Price(input=0.80, output=4.0, cache_write=1.0, cache_read=0.08, cache_write_1h=1.60)
    assert table.price(HAIKU_35, batch=False) == normal
    batch = table.price(HAIKU_35, batch=True)
    assert batch is not None
    assert (batch.input, batch.output, batch.cache_write, batch.cache_read, batch.cache_write_1h) == pytest.approx(
        (0.40, 2.0, 0.50, 0.04, 0.80)
    )


def test_the_breakdown_by_lifetime_is_used_when_the_provider_gives_it() -> None:
    # 1,000,000 written: 400,000 for five minutes ($0.50 in a batch), 600,000 for an hour ($0.80).
    cost = PriceTable().cost(HAIKU_35, usage(write=1_000_000, five=400_000, hour=600_000), batch=True)
    assert cost is not None
    assert cost.usd == pytest.approx(0.4 * 0.50 + 0.6 * 0.80)
    assert cost.without_batch_usd == pytest.approx(0.4 * 1.0 + 0.6 * 1.60)
    # Writes never read back cost more than plain input: the cache lost 0.68 - 1,000,000 x $0.40.
    assert cost.cache_savings_usd == pytest.approx(0.40 - 0.68)


def test_writes_without_a_breakdown_are_priced_at_the_lifetime_sent() -> None:
    # Batch requests to Anthropic ask for one hour; normal calls leave the default five minutes.
    old = usage(write=1_000_000)
    table = PriceTable()
    batch = table.cost(HAIKU_35, old, batch=True)
    normal = table.cost(HAIKU_35, old, batch=False)
    assert batch is not None and normal is not None
    assert batch.usd == pytest.approx(0.80)
    assert normal.usd == pytest.approx(1.00)


def test_openai_cache_reads_are_cheaper_and_writes_are_plain_input() -> None:
    # GPT-4o mini: $0.15 input, $0.075 cached input, $0.60 output; no cache-write charge.
    cost = PriceTable().cost("openai/gpt-4o-mini", usage(1_000_000, 0, 1_000_000, 1_000_000), batch=False)
    assert cost is not None
    assert cost.usd == pytest.approx(0.15 + 0.075 + 0.15)
    assert cost.cache_savings_usd == pytest.approx(0.15 - 0.075)


def test_long_prompts_pay_the_higher_tier() -> None:
    # Claude Sonnet 4.5 bills every token of a prompt over 200,000 tokens at $6 instead of $3.
    table = PriceTable()
    short = table.price("anthropic/claude-sonnet-4-5-20250929", batch=False, prompt_tokens=200_000)
    long = table.price("anthropic/claude-sonnet-4-5-20250929", batch=False, prompt_tokens=200_001)
    assert short is not None and long is not None
    assert (short.input, long.input) == (3.0, 6.0)


def test_overrides_come_first_and_batch_halves_them() -> None:
    table = PriceTable(
        {
            "openai/my-model": {"input": 1, "output": 2, "cache_write": 1, "cache_read": 0.5},
            "anthropic/claude-haiku-4-5*": {"input": 2, "output": 10, "cache_write": 2.5, "cache_read": 0.2,
                                            "cache_write_1h": 4},
        }
    )  # fmt: skip
    mine = table.cost("openai/my-model", usage(1_000_000, 100_000), batch=False)
    assert mine is not None and mine.usd == pytest.approx(1.2)
    # Without a 1-hour price, an override bills every write at ``cache_write``.
    hour = table.cost("openai/my-model", usage(write=1_000_000, hour=1_000_000), batch=True)
    assert hour is not None and hour.usd == pytest.approx(0.5)
    haiku = table.cost(HAIKU_45, usage(write=1_000_000, hour=1_000_000), batch=True)
    assert haiku is not None and haiku.usd == pytest.approx(2.0)
    assert table.cost("openai/unknown-model", usage(1), batch=True) is None
    assert table.cost("nobody/model", usage(1), batch=True) is None


def test_prices_come_from_the_bundled_data_whatever_genai_prices_was_told_to_use() -> None:
    # ``UpdatePrices`` (never started by nightshift) would replace genai-prices' global snapshot
    # with fetched data: the table reads the data shipped with the pinned package all the same.
    before = get_snapshot()
    set_custom_snapshot(DataSnapshot(providers=[], from_auto_update=True))
    try:
        assert PriceTable().price(HAIKU_45, batch=False) is not None
    finally:
        set_custom_snapshot(before if before.from_auto_update else None)


def test_gemini_models_are_priced_from_googles_data_batch_at_half() -> None:
    # Gemini 2.5 Flash: $0.30 input, $2.50 output, $0.03 cached input; the batch API bills half
    # of input and output (the data's own batch rates).
    table = PriceTable()
    normal = table.price("google_ai/gemini-2.5-flash", batch=False)
    batch = table.price("google_ai/gemini-2.5-flash", batch=True)
    assert normal is not None and batch is not None
    assert (normal.input, normal.output, normal.cache_read) == (0.3, 2.5, 0.03)
    assert (batch.input, batch.output) == (0.15, 1.25)
    # Google's data lists Vertex's Claude models too: they are no Gemini API models.
    assert table.price("google_ai/claude-4-sonnet", batch=False) is None
    gemini = [m.name for m in known_models() if m.provider == "google_ai"]
    assert "gemini-2.5-flash" in gemini and not [n for n in gemini if not n.startswith("gemini-")]
