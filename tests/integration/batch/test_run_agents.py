"""GET /v1/messages/batches/{id}/agents: each agent's name, state, steps, tokens and cost.

And the run's own view of the same: its failed agents by name, each provider batch's tokens and cost.
"""

from __future__ import annotations

import pytest

from integration.batch.kit import call, say
from support.stepped import SteppedRuns, mixed_run


async def test_each_agent_reports_its_state_tokens_and_cost(stepped: SteppedRuns) -> None:
    run, bad, two_steps, one_step = await mixed_run(stepped)

    response = await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents")
    assert response.status_code == 200, response.text
    agents = {a["agent_id"]: a for a in response.json()["agents"]}
    assert list(agents) == sorted(agents)
    assert agents[bad["id"]]["state"] == "failed"
    assert "invalid_request_error" in agents[bad["id"]]["error"]
    assert agents[bad["id"]]["steps"] == 0 and agents[bad["id"]]["cost_usd"] == 0
    # Each agent by name, with the step (from 0) it is in, or stopped or failed at.
    assert {a["agent_name"]: a["step_number"] for a in agents.values()} == {"bad": 0, "two-steps": 1, "one-step": 0}
    assert agents[two_steps["id"]]["state"] == "finished" and agents[two_steps["id"]]["steps"] == 2
    assert agents[one_step["id"]]["state"] == "finished" and agents[one_step["id"]]["steps"] == 1
    for agent_id in (two_steps["id"], one_step["id"]):
        row = agents[agent_id]
        assert row["usage"]["input_tokens"] > 0 and row["usage"]["output_tokens"] > 0
        assert row["cost_usd"] > 0
        assert row["cost_without_batch_usd"] == pytest.approx(row["cost_usd"] * 2, abs=2e-6)  # both rounded
        assert row["error"] is None
    # Two steps cost more than one; the per-agent costs add up to the run's.
    assert agents[two_steps["id"]]["cost_usd"] > agents[one_step["id"]]["cost_usd"]
    total = (await stepped.client.get(f"/v1/messages/batches/{run['id']}")).json()["progress"]["cost_usd"]
    assert abs(sum(a["cost_usd"] for a in agents.values()) - total) < 1e-5

    first = (await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents", params={"limit": 2})).json()["agents"]
    rest = (
        await stepped.client.get(
            f"/v1/messages/batches/{run['id']}/agents", params={"limit": 2, "after": first[-1]["agent_id"]}
        )
    ).json()["agents"]
    assert [a["agent_id"] for a in first + rest] == sorted(agents)
    assert (await stepped.client.get("/v1/messages/batches/batch-nope/agents")).status_code == 404


async def test_the_run_names_its_failed_agents_and_costs_each_provider_batch(stepped: SteppedRuns) -> None:
    bad = await stepped.agent("bad")
    two_steps = await stepped.agent("two-steps")
    stepped.model.configure(errors={bad["id"]: "invalid_request_error"})
    stepped.model.script(two_steps["id"], call("conversation_search", heartbeat=True, query="hi"), say("done"))
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in (bad, two_steps)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    progress = done["progress"]
    (failure,) = progress["failures"]
    assert (failure["agent_id"], failure["agent_name"], failure["step_number"]) == (bad["id"], "bad", 0)
    batches = sorted(progress["provider_batches"], key=lambda b: b["step_number"])
    assert [b["step_number"] for b in batches] == [0, 1]
    for batch in batches:
        assert batch["cost_usd"] > 0 and batch["usage"]["output_tokens"] > 0
    # The batches' costs and tokens add up to the run's.
    assert abs(sum(b["cost_usd"] for b in batches) - progress["cost_usd"]) < 1e-5
    for key, total in progress["usage"].items():
        assert sum(b["usage"].get(key, 0) for b in batches) == total
