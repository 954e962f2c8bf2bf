"""A run's costs at the providers' published prices, with one-hour cache writes."""

from __future__ import annotations

from typing import Any

import pytest

from integration.batch.kit import call, say
from support.stepped import SteppedRuns

# Claude Haiku 4.5 through the Message Batches API, USD per million tokens (Anthropic's price
# page: $1 input and $5 output, halved in a batch; a one-hour cache write 2x the input price, a
# read 0.1x): the rates the run must be billed at.
HAIKU = "anthropic/claude-haiku-4-5-20251001"
INPUT, OUTPUT, READ, WRITE_1H = 0.50, 2.50, 0.05, 1.00


def by_hand(usage: dict[str, Any]) -> tuple[float, float, float]:
    """(cost, cost through the normal API, cache savings) of ``usage`` at the rates above."""
    cost = (
        usage["input_tokens"] * INPUT
        + usage["output_tokens"] * OUTPUT
        + usage["cache_read_tokens"] * READ
        + usage["cache_write_1h_tokens"] * WRITE_1H
    ) / 1e6
    cached = usage["cache_read_tokens"] + usage["cache_write_1h_tokens"]
    savings = (cached * INPUT - usage["cache_read_tokens"] * READ - usage["cache_write_1h_tokens"] * WRITE_1H) / 1e6
    return cost, cost * 2, savings


@pytest.mark.settings(cache_policy="1h")
async def test_a_run_with_one_hour_cache_writes_costs_the_published_rates(stepped: SteppedRuns) -> None:
    # Two agents share their tools (the first writes them to the cache, the second reads them);
    # one takes a second step, which reads its own system prompt back.
    first = await stepped.agent("first", model=HAIKU)
    second = await stepped.agent("second", model=HAIKU)
    stepped.model.script(first["id"], call("conversation_search", heartbeat=True, query="hi"), say("done"))
    stepped.model.script(second["id"], say("hello"))
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in (first, second)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    progress = done["progress"]
    usage = progress["usage"]
    # Every write was made for an hour (the emulator reports the split as the API does), and the
    # cache was both written and read.
    assert usage["cache_write_tokens"] == usage["cache_write_1h_tokens"] > 0
    assert usage["cache_write_5m_tokens"] == 0
    assert usage["cache_read_tokens"] > 0
    cost, without_batch, savings = by_hand(usage)
    assert progress["cost_usd"] == pytest.approx(round(cost, 6), abs=1e-6)
    assert progress["cost_without_batch_usd"] == pytest.approx(round(without_batch, 6), abs=1e-6)
    assert progress["batch_savings_usd"] == pytest.approx(round(without_batch - cost, 6), abs=1e-6)
    assert progress["cache_savings_usd"] == pytest.approx(round(savings, 6), abs=1e-6)

    # Each agent's figures are its own tokens at the same rates, and add up to the run's.
    response = await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents")
    agents = response.json()["agents"]
    for agent in agents:
        cost, without_batch, savings = by_hand(agent["usage"])
        assert agent["cost_usd"] == pytest.approx(round(cost, 6), abs=1e-6)
        assert agent["cache_savings_usd"] == pytest.approx(round(savings, 6), abs=1e-6)
    assert sum(a["cache_savings_usd"] for a in agents) == pytest.approx(progress["cache_savings_usd"], abs=1e-5)
