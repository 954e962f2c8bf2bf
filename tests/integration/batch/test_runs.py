"""Batch runs through the API on SQLite and PostgreSQL: stepped over the scripted provider, and end to
end through the emulator with a live poller for both providers."""

from __future__ import annotations

import json

import pytest

from support.runs import OPENAI_MODEL, Runs
from support.stepped import SteppedRuns


async def test_one_step_run_completes_for_every_agent(stepped: SteppedRuns) -> None:
    agents = [await stepped.agent(f"a{i}") for i in range(3)]
    run = await stepped.start(
        [{"agent_id": a["id"], "messages": [{"role": "user", "content": "hello there"}]} for a in agents]
    )
    assert run["id"].startswith("batch-")
    assert run["job_type"] == "batch"
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 3, "failed": 0, "cancelled": 0}
    assert done["completed_at"] is not None
    usage = done["progress"]["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert done["progress"]["cost_usd"] > 0
    assert done["progress"]["cost_without_batch_usd"] == pytest.approx(done["progress"]["cost_usd"] * 2, abs=2e-6)
    messages = await stepped.messages(run["id"])
    by_agent: dict[str, list[str]] = {}
    for message in messages:
        by_agent.setdefault(message["agent_id"], []).append(message["role"])
    assert by_agent == {a["id"]: ["user", "assistant", "tool"] for a in agents}
    assistant = next(m for m in messages if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["name"] == "send_message"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"])["message"]


async def test_mixed_providers_run(runs: Runs) -> None:
    one = await runs.agent("anthropic-agent")
    two = await runs.agent("openai-agent", model=OPENAI_MODEL)
    run = await runs.start([{"agent_id": a["id"], "input": "hi"} for a in (one, two)])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    providers = sorted(b["provider"] for b in done["progress"]["provider_batches"])
    assert providers == ["anthropic", "openai"]
