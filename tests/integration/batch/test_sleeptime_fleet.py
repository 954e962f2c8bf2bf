"""A fleet of agents with sleep-time agents, stepped pass by pass over the scripted model.

200 main agents, frequency 2, four turns each in batch runs, the user stating a fact at each turn.
After the second turn their sleep-time agents are gathered into one batch run, held open at the
provider while the main agents take their third and fourth turns: no main turn waits for it. After
the fourth turn they are gathered again. Each sleep-time run steps every agent in one provider
batch per step; every shared block ends with the facts its own user stated; the sleep-time costs
are shown apart and add up to their items'.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from support.api import json_list, json_object
from support.stepped import SteppedRuns

# Two hundred agents made one request at a time, four turns and two sleep-time runs: tens of
# seconds on two busy cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

AGENTS = 200
FACTS = ("My name is Name-{i:03d}.", "I live in City-{i:03d}.", "I like tea-{i:03d}.", "I work at Firm-{i:03d}.")


async def _turn(stepped: SteppedRuns, mains: list[dict[str, Any]], turn: int) -> dict[str, Any]:
    run = await stepped.start([{"agent_id": m["id"], "input": FACTS[turn].format(i=i)} for i, m in enumerate(mains)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == AGENTS, done
    return done


async def _sleeptime_run(stepped: SteppedRuns) -> dict[str, Any]:
    (run,) = json_list(await stepped.client.post("/v1/sleeptime/run", json={}))
    assert run["kind"] == "sleeptime"
    return dict(run)


async def test_a_fleet_keeps_its_memory_in_two_sleeptime_runs_without_holding_its_main_agents(
    stepped: SteppedRuns,
) -> None:
    mains = []
    for i in range(AGENTS):
        main = await stepped.agent(f"pal-{i:03d}", agent_type="letta_v1_agent", enable_sleeptime=True)
        group = main["managed_group"]
        changed = await stepped.client.patch(
            f"/v1/groups/{group['id']}",
            json={"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 2}},
        )
        assert changed.status_code == 200, changed.text
        mains.append(main)

    await _turn(stepped, mains, 0)
    assert json_list(await stepped.client.post("/v1/sleeptime/run", json={})) == []  # one turn: not due
    await _turn(stepped, mains, 1)
    with stepped.model.holding():
        first = await _sleeptime_run(stepped)
        await stepped.step()  # its first step submitted, and held open at the provider
    assert json_object(await stepped.client.get(f"/v1/messages/batches/{first['id']}"))["status"] == "running"
    # The main agents take two more turns while their sleep-time agents' batch is open.
    await _turn(stepped, mains, 2)
    await _turn(stepped, mains, 3)
    assert json_object(await stepped.client.get(f"/v1/messages/batches/{first['id']}"))["status"] == "running"
    stepped.model.release()
    first = await stepped.finish(first["id"])
    second = await stepped.finish((await _sleeptime_run(stepped))["id"])

    for run in (first, second):
        assert run["status"] == "completed", run
        assert run["progress"]["agents"]["finished"] == AGENTS, run
        # Every sleep-time agent in one provider batch per step: memory_insert, then memory_finish_edits.
        steps = [b["step_number"] for b in run["progress"]["provider_batches"]]
        assert sorted(steps) == [0, 1], run["progress"]["provider_batches"]
    listed = json_list(await stepped.client.get("/v1/messages/batches", params={"kind": "sleeptime"}))
    assert {r["id"] for r in listed} == {first["id"], second["id"]}

    for i, main in enumerate(mains):
        human = json_object(await stepped.client.get(f"/v1/agents/{main['id']}/core-memory/blocks/human"))
        for fact in FACTS:
            token = fact.format(i=i).split()[-1].rstrip(".")
            assert token in human["value"], (token, human["value"])
        assert f"{i + 1:03d}" not in human["value"].replace(f"{i:03d}", "")  # no other agent's facts

    # The sleep-time runs' cost is their agents' (item by item), and shown apart from the main runs'.
    # The sleep-time runs' cost is their agents' (each rounded to a millionth of a dollar), and is
    # shown apart from the main runs'.
    costs = [run["progress"] for run in (first, second)]
    for run, cost in zip((first, second), costs, strict=True):
        page = await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents", params={"limit": 1000})
        agents = json_object(page)["agents"]
        assert len(agents) == AGENTS
        assert cost["cost_usd"] > 0
        assert math.isclose(cost["cost_usd"], sum(a["cost_usd"] for a in agents), abs_tol=AGENTS * 1e-6)
        assert cost["cost_without_batch_usd"] > cost["cost_usd"]  # the normal API's price for the same tokens
    summary = json_object(await stepped.client.get("/v1/messages/batches/costs"))
    sleeping = next(k for k in summary["kinds"] if k["kind"] == "sleeptime")
    assert sleeping["runs"] == 2
    assert math.isclose(sleeping["cost_usd"], sum(c["cost_usd"] for c in costs), abs_tol=1e-6)
