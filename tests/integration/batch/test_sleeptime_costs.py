"""Sleep-time runs read apart from the main ones: their kind on the run view, the ``kind`` filter of
the run list, the costs by kind (what the items add up to, in one statement whatever the number of
runs) and the usage counters of ``/metrics`` by ``run_kind``."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.batches import BatchRunKind
from nightshift.domain.usage import USAGE_KEYS
from nightshift.store.batch_runs import costs_by_kind
from nightshift.store.tables import batch_items, batch_runs
from support.api import json_list, json_object
from support.scripted import call, say
from support.statements import statements
from support.stepped import SteppedRuns

COSTS = ("cost_usd", "cost_without_batch_usd", "cache_savings_usd")


def close(left: float, right: float) -> bool:
    """Equal up to the last bits of a float: the database adds the rows in an order of its own."""
    return math.isclose(left, right, rel_tol=1e-12, abs_tol=1e-15)


async def _main_turns(stepped: SteppedRuns, main: dict[str, Any], turns: int) -> list[str]:
    """``turns`` runs of the main agent, each finished; returns their ids."""
    ids = []
    for turn in range(turns):
        stepped.model.script(main["id"], say(f"noted {turn}"))
        run = await stepped.start([{"agent_id": main["id"], "input": f"my favourite number is {turn}"}])
        assert (await stepped.finish(run["id"]))["status"] == "completed"
        ids.append(run["id"])
    return ids


async def _items_by_kind(engine: AsyncEngine) -> dict[str, dict[str, Any]]:
    """Each kind's items added up in Python, row by row: what the costs by kind must say."""
    query = select(batch_runs.c.kind, batch_items).join(batch_runs, batch_runs.c.id == batch_items.c.batch_run_id)
    found: dict[str, dict[str, Any]] = {}
    async with engine.connect() as conn:
        for row in await conn.execute(query):
            sums = found.setdefault(row.kind, {"items": 0, "agents": set(), **dict.fromkeys(COSTS, 0.0)})
            sums["items"] += 1
            sums["agents"].add(row.agent_id)
            for key in USAGE_KEYS:
                sums[key] = sums.get(key, 0) + int((row.usage or {}).get(key) or 0)
            for key in COSTS:
                sums[key] += getattr(row, key) or 0.0
    return found


async def test_sleeptime_runs_are_shown_filtered_and_costed_apart(stepped: SteppedRuns) -> None:
    client, engine = stepped.client, stepped.worker.engine
    main = await stepped.agent("pal", agent_type="letta_v1_agent", enable_sleeptime=True)
    (sleeper,) = json_list(await client.get("/v1/agents", params={"name": "pal-sleeptime"}))
    main_ids = await _main_turns(stepped, main, 1)
    with statements(engine) as few:
        assert (await client.get("/v1/messages/batches/costs")).status_code == 200
    main_ids += await _main_turns(stepped, main, 4)  # the fifth turn makes the sleep-time agent due

    stepped.model.script(
        sleeper["id"],
        call("memory_insert", label="human", new_str="Favourite numbers: 0 to 4"),
        call("memory_finish_edits"),
    )
    (queued,) = json_list(await client.post("/v1/sleeptime/run", json={"all": False}))
    assert queued["kind"] == "sleeptime"
    done = await stepped.finish(queued["id"])
    assert done["status"] == "completed" and done["kind"] == "sleeptime", done
    assert json_object(await client.get(f"/v1/messages/batches/{main_ids[0]}"))["kind"] == "main"

    # The list's filter.
    listed = {
        kind: [r["id"] for r in json_list(await client.get("/v1/messages/batches", params={"kind": kind}))]
        for kind in ("main", "sleeptime")
    }
    assert listed == {"main": main_ids, "sleeptime": [queued["id"]]}
    every = json_list(await client.get("/v1/messages/batches"))
    assert sorted(r["id"] for r in every) == sorted([*main_ids, queued["id"]])
    assert (await client.get("/v1/messages/batches", params={"kind": "nightly"})).status_code == 422

    # The costs by kind: what the items add up to, in as many statements as with one run.
    with statements(engine) as many:
        costs = json_object(await client.get("/v1/messages/batches/costs"))
    # (The app's own background work may send a statement meanwhile: only the batch tables' count.)
    read = [s for s in many if "batch_" in s]
    assert len(read) == len([s for s in few if "batch_" in s]) == 1, many
    by_kind = {k["kind"]: k for k in costs["kinds"]}
    assert list(by_kind) == ["main", "sleeptime"]
    expected = await _items_by_kind(engine)
    assert by_kind["main"]["runs"] == len(main_ids) and by_kind["sleeptime"]["runs"] == 1
    assert by_kind["main"]["agents"] == 1 and by_kind["sleeptime"]["agents"] == 1
    for kind, ids in (("main", main_ids), ("sleeptime", [queued["id"]])):
        steps = 0
        for run_id in ids:
            agents = json_object(await client.get(f"/v1/messages/batches/{run_id}/agents"))["agents"]
            steps += sum(a["steps"] for a in agents)
        assert by_kind[kind]["requests"] == steps == expected[kind]["items"], kind  # each item was answered
    async with engine.connect() as conn:
        org = (await conn.execute(select(batch_runs.c.organization_id).where(batch_runs.c.id == main_ids[0]))).scalar()
        assert org is not None
        stored = {kind.value: k for kind, k in (await costs_by_kind(conn, org)).items()}
    for kind in ("main", "sleeptime"):
        sums, shown, summed = expected[kind], by_kind[kind], stored[kind]
        assert shown["cost_usd"] > 0, shown
        assert summed.usage is not None and summed.usage.to_json() == {k: sums[k] for k in USAGE_KEYS}
        assert shown["usage"] == summed.usage.to_json()
        assert close(summed.cost.usd, sums["cost_usd"])
        assert close(summed.cost.without_batch_usd, sums["cost_without_batch_usd"])
        assert close(summed.cost.cache_savings_usd, sums["cache_savings_usd"])
        for key in COSTS:
            assert shown[key] == pytest.approx(sums[key], abs=1e-6), key  # shown to a millionth of a dollar
        assert shown["batch_savings_usd"] == pytest.approx(sums["cost_without_batch_usd"] - sums["cost_usd"], abs=2e-6)
    assert by_kind["sleeptime"]["cost_usd"] == pytest.approx(done["progress"]["cost_usd"], abs=1e-6)

    # /metrics counts the sleep-time run's tokens and cost under run_kind="sleeptime".
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    provider, model = main["model"].split("/", 1) if "/" in main["model"] else (None, main["model"])
    labels = {"provider": provider, "model": model}

    def sample(name: str, **more: str) -> float:
        return samples.get((name, frozenset({**labels, **more}.items())), 0.0)

    for run_kind in ("main", "sleeptime"):
        tokens = sample("nightshift_tokens_total", kind="output", run_kind=run_kind)
        assert tokens == by_kind[run_kind]["usage"]["output_tokens"] > 0, run_kind
        cost = sample("nightshift_cost_usd_total", run_kind=run_kind)
        assert cost == pytest.approx(by_kind[run_kind]["cost_usd"], abs=1e-6), run_kind


async def test_an_organization_without_runs_costs_nothing_of_either_kind(stepped: SteppedRuns) -> None:
    costs = json_object(await stepped.client.get("/v1/messages/batches/costs"))
    assert [k["kind"] for k in costs["kinds"]] == [kind.value for kind in BatchRunKind]
    for kind in costs["kinds"]:
        assert kind["runs"] == kind["agents"] == kind["requests"] == 0
        assert kind["usage"] == {}
        assert kind["cost_usd"] == kind["cost_without_batch_usd"] == kind["cache_savings_usd"] == 0
