"""A batch step over N agents costs the same number of SQL statements for 10 agents as for 200.

Statements are counted on the app's engine (``before_cursor_execute``: an ``executemany`` counts
once) while two runs go through the same phases, one of 10 agents and one of 200, half of them on
Anthropic and half on OpenAI:

* create + submit: ``POST /v1/messages/batches`` writes the run and its first step, and submits it;
* poll + resume, step 1: the worker polls, stores the results, applies the memory edits, writes the
  heartbeats and the next step, and submits it;
* poll + resume, step 2: the worker polls, stores the results, applies the replies, ends the run.

The poller is off: the test drives the worker itself, one ``run_once`` per phase.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from nightshift.batch.worker import Worker
from nightshift.config import Settings
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from support.clock import clock_of
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL, Runs
from support.statements import statements

SIZES = (10, 200)
PHASES = ("create+submit", "poll+resume step 1", "poll+resume step 2")
# The emulator's model answers this with core_memory_append and request_heartbeat (step 1), then
# with send_message once it sees the tool's result (step 2).
MESSAGE = "Please remember that my favourite colour is teal."


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, poller=False)


# Rows inserted many at once go by INSERT or, on PostgreSQL from ``COPY_MIN_ROWS`` rows on, by COPY
# (``store.copy``): the same statement for this count, whichever way it went.
ROWS_INTO = re.compile(r"\s*(?:INSERT INTO|COPY) (\w+) \(.*", re.I | re.S)


def shape(statement: str) -> str:
    """A statement without its literal values, to group statements in a failure message."""
    if rows_into := ROWS_INTO.fullmatch(statement):
        return f"rows into {rows_into[1]}"
    return re.sub(r"\s+", " ", re.sub(r"'[^']*'|\$\d+|\b\d+\b", "?", statement)).strip()[:160]


async def create_agents(runs: Runs, size: int, models: tuple[str, ...]) -> list[dict[str, Any]]:
    """``size`` agents taking turns at the models, created a few at a time."""
    gate = asyncio.Semaphore(8)

    async def one(index: int) -> dict[str, Any]:
        async with gate:
            return await runs.agent(f"agent-{size}-{index}", model=models[index % len(models)])

    # The organization's base tools are made with its first agents, by whichever requests come
    # first at once (ensure_base_tools inserts what is missing, skipping what another just did).
    return list(await asyncio.gather(*(one(i) for i in range(size))))


async def run_phases(
    app: FastAPI, runs: Runs, size: int, script: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None
) -> list[list[str]]:
    """Take a run of ``size`` fresh agents through the phases; the statements of each phase.

    ``script``, if given, is called with the agents before the run starts (to script their answers).
    """
    state = app.state.nightshift
    worker: Worker = state.worker
    engine = state.engine
    models = (ANTHROPIC_MODEL, OPENAI_MODEL)
    agents = await create_agents(runs, size, models)
    if script is not None:
        await script(agents)

    async def step() -> None:
        clock_of(app).advance(worker.poll_interval * 2)  # the batches are due again
        assert await worker.run_once() == len(models)

    async def create() -> None:
        run.update(await runs.start([{"agent_id": a["id"], "input": MESSAGE} for a in agents]))

    run: dict[str, Any] = {}
    actions: list[Callable[[], Awaitable[None]]] = [create, step, step]
    counted = []
    for action in actions:
        with statements(engine) as sent:
            await action()
        counted.append(sent)
    done = (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == size, done
    assert sorted(b["step_number"] for b in done["progress"]["provider_batches"]) == [0, 0, 1, 1]
    return counted


def differences(small: list[list[str]], large: list[list[str]], what: tuple[str, str]) -> list[str]:
    """Per phase, how the statements of the ``large`` case differ from the ``small`` one's."""
    problems = []
    for phase, few, many in zip(PHASES, small, large, strict=True):
        grown = Counter(map(shape, many)) - Counter(map(shape, few))
        shrunk = Counter(map(shape, few)) - Counter(map(shape, many))
        if len(few) != len(many) or grown or shrunk:
            problems.append(f"{phase}: {len(few)} statements for {what[0]}, {len(many)} for {what[1]}")
            problems.append(f"  only with {what[1]}: {grown.most_common(5)}")
            problems.append(f"  only with {what[0]}: {shrunk.most_common(5)}")
    return problems


async def test_statements_per_phase_do_not_grow_with_the_agents(
    app: FastAPI, client: httpx.AsyncClient, admin: EmulatorAdmin
) -> None:
    runs = Runs(client, worker=app.state.nightshift.worker)
    counts = {size: await run_phases(app, runs, size) for size in SIZES}
    small, large = (counts[size] for size in SIZES)
    problems = differences(small, large, (f"{SIZES[0]} agents", f"{SIZES[1]} agents"))
    assert not problems, "\n".join(problems)
    print({phase: len(few) for phase, few in zip(PHASES, small, strict=True)})


def notes(count: int) -> ScriptedReply:
    """One turn of ``count`` memory appends, asking for another turn."""
    calls = [
        ScriptedToolCall(
            name="core_memory_append", arguments={"label": "human", "content": f"fact {i}"}, request_heartbeat=True
        )
        for i in range(count)
    ]
    return ScriptedReply(tool_calls=calls)


async def test_a_turn_of_three_calls_costs_the_statements_of_a_turn_of_one(
    app: FastAPI, client: httpx.AsyncClient, admin: EmulatorAdmin
) -> None:
    runs = Runs(client, worker=app.state.nightshift.worker)

    def scripted(calls: int) -> Callable[[list[dict[str, Any]]], Awaitable[None]]:
        async def script(agents: list[dict[str, Any]]) -> None:
            for agent in agents:
                await admin.script(
                    agent["id"],
                    notes(calls),
                    ScriptedReply(tool_call=ScriptedToolCall(name="send_message", arguments={"message": "ok"})),
                )

        return script

    one, three = [await run_phases(app, runs, SIZES[0], scripted(calls)) for calls in (1, 3)]
    problems = differences(one, three, ("one call per turn", "three calls per turn"))
    assert not problems, "\n".join(problems)


async def test_reading_runs_costs_the_same_statements_for_one_run_as_for_five(
    app: FastAPI, client: httpx.AsyncClient, admin: EmulatorAdmin
) -> None:
    # Each run: one agent finishes, one fails (its request refused), so every part of a run's
    # view (progress, provider batches, failed agents) has something to read.
    worker: Worker = app.state.nightshift.worker
    runs = Runs(client, worker=app.state.nightshift.worker)
    started = []
    for index in range(5):
        ok, bad = await runs.agent(f"ok-{index}"), await runs.agent(f"bad-{index}")
        await admin.configure(errors={bad["id"]: "invalid_request_error"})
        started.append((await runs.start([{"agent_id": a["id"], "input": "hi"} for a in (ok, bad)]), bad["id"]))
        clock_of(app).advance(worker.poll_interval * 2)
        await worker.run_once()
    engine = app.state.nightshift.engine

    listed = {}
    for limit in (1, 5):
        with statements(engine) as sent:
            found = (await client.get("/v1/messages/batches", params={"limit": limit})).json()
        listed[limit] = sent
        assert len(found) == limit
    with statements(engine) as one_run:
        run = (await client.get(f"/v1/messages/batches/{started[0][0]['id']}")).json()

    assert Counter(map(shape, listed[1])) == Counter(map(shape, listed[5]))
    assert len(one_run) == len(listed[1])  # the organization's key, the run, then the same reads
    failing = {started_run["id"]: bad_id for started_run, bad_id in started}
    for view in [*found, run]:
        assert view["status"] == "completed", view
        (failure,) = view["progress"]["failures"]
        assert failure["agent_id"] == failing[view["id"]]
        assert failure["request_status"] == "failed" and "invalid_request_error" in failure["error"]
    print({"list runs": len(listed[5]), "get run": len(one_run)})


async def test_reading_a_runs_agents_costs_the_same_statements_for_2_agents_as_for_20(
    app: FastAPI, client: httpx.AsyncClient, admin: EmulatorAdmin
) -> None:
    worker: Worker = app.state.nightshift.worker
    runs = Runs(client, worker=app.state.nightshift.worker)
    engine = app.state.nightshift.engine
    read: dict[int, list[str]] = {}
    for size in (2, 20):
        agents = [await runs.agent(f"reader-{size}-{index}") for index in range(size)]
        run = await runs.start([{"agent_id": a["id"], "input": "hi"} for a in agents])
        clock_of(app).advance(worker.poll_interval * 2)
        await worker.run_once()
        with statements(engine) as sent:
            found = (await client.get(f"/v1/messages/batches/{run['id']}/agents")).json()["agents"]
        read[size] = sent
        assert sorted(a["agent_name"] for a in found) == sorted(a["name"] for a in agents)
        assert {a["state"] for a in found} == {"finished"}
    assert Counter(map(shape, read[2])) == Counter(map(shape, read[20]))
    print({"run agents": len(read[20])})


async def test_listing_messages_tags_and_agents_and_the_context_cost_the_same_statements_for_2_as_for_20(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    engine = app.state.nightshift.engine
    read: dict[int, dict[str, list[str]]] = {}
    for size in (2, 20):
        agent = (
            await client.post(
                "/v1/agents/",
                json={
                    "name": f"lister-{size}",
                    "model": ANTHROPIC_MODEL,
                    "initial_message_sequence": [{"role": "user", "content": f"m{n}"} for n in range(size)],
                },
            )
        ).json()
        for index in range(size):
            tags = [f"t{size}-{index}", "shared"]
            made = await client.post(
                "/v1/agents/",
                json={"name": f"tagged-{size}-{index}", "model": ANTHROPIC_MODEL, "tags": tags},
            )
            assert made.status_code == 200, made.text
        read[size] = {}
        queries = {
            "messages": (f"/v1/agents/{agent['id']}/messages", {"after": agent["message_ids"][0], "order": "asc"}),
            "tags": ("/v1/tags/", {"limit": 1000}),
            "agents": ("/v1/agents/", {"query_text": f"tagged-{size}-", "limit": 1000}),
            "context": (f"/v1/agents/{agent['id']}/context", {}),
        }
        for what, (path, params) in queries.items():
            with statements(engine) as sent:
                found = (await client.get(path, params=params)).json()
            read[size][what] = sent
            assert len(found["messages"] if what == "context" else found) >= size, (what, found)
    for what in ("messages", "tags", "agents", "context"):
        assert Counter(map(shape, read[2][what])) == Counter(map(shape, read[20][what])), what
    print({what: len(read[20][what]) for what in read[20]})


async def test_listing_sleep_time_agents_costs_the_same_statements_for_2_as_for_20(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The groups of a page of main agents are read together; a page of plain agents reads none."""
    engine = app.state.nightshift.engine
    read: dict[int, dict[str, list[str]]] = {}
    for size in (2, 20):
        for index in range(size):
            made = await client.post(
                "/v1/agents/",
                json={"name": f"sleepy-{size}-{index}", "model": ANTHROPIC_MODEL, "enable_sleeptime": True},
            )
            assert made.status_code == 200, made.text
            plain = await client.post("/v1/agents/", json={"name": f"awake-{size}-{index}", "model": ANTHROPIC_MODEL})
            assert plain.status_code == 200, plain.text
        read[size] = {}
        for what in ("sleepy", "awake"):
            with statements(engine) as sent:
                found = (
                    await client.get("/v1/agents/", params={"query_text": f"{what}-{size}-", "limit": 1000})
                ).json()
            read[size][what] = sent
            managed = [a for a in found if a["managed_group"] is not None]
            assert len(managed) == (size if what == "sleepy" else 0), found
        with statements(engine) as sent:
            groups = (await client.get("/v1/groups/", params={"limit": 1000})).json()
        read[size]["groups"] = sent
        assert len(groups) >= size
    for what in ("sleepy", "awake", "groups"):
        assert Counter(map(shape, read[2][what])) == Counter(map(shape, read[20][what])), what
    assert not [s for s in read[20]["awake"] if "groups" in s], read[20]["awake"]
    print({what: len(read[20][what]) for what in read[20]})


async def test_reading_archival_memory_costs_the_same_statements_for_2_passages_as_for_20(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    engine = app.state.nightshift.engine
    read: dict[int, dict[str, list[str]]] = {}
    for size in (2, 20):
        agent = (await client.post("/v1/agents/", json={"name": f"keeper-{size}", "model": ANTHROPIC_MODEL})).json()
        url = f"/v1/agents/{agent['id']}/archival-memory"
        made = [
            (await client.post(url, json={"text": f"note {n} of {size}", "tags": [f"t{n}", "shared"]})).json()[0]
            for n in range(size)
        ]
        queries: dict[str, tuple[str, Any]] = {
            "list": (url, {"limit": 1000}),
            "list after a cursor": (url, {"after": made[-1]["id"], "ascending": "false"}),
            "list with search": (url, {"search": "note", "limit": 1000}),
            "search": (f"{url}/search", [("query", "note"), ("top_k", 1000), ("tags", "shared"), ("tags", "t0")]),
        }
        read[size] = {}
        for what, (path, params) in queries.items():
            with statements(engine) as sent:
                found = (await client.get(path, params=params)).json()
            read[size][what] = sent
            rows = found["results"] if what == "search" else found
            assert len(rows) >= size - 1, (what, found)
    for what in read[2]:
        assert Counter(map(shape, read[2][what])) == Counter(map(shape, read[20][what])), what
    print({what: len(read[20][what]) for what in read[20]})


async def test_reading_one_agent_costs_the_same_statements_in_an_organization_of_1_or_21(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    engine = app.state.nightshift.engine
    agent = (await client.post("/v1/agents/", json={"name": "alone", "model": ANTHROPIC_MODEL, "tags": ["a"]})).json()
    read: list[list[str]] = []
    for more in (0, 20):
        for index in range(more):
            made = await client.post(
                "/v1/agents/", json={"name": f"other-{index}", "model": ANTHROPIC_MODEL, "tags": ["a", f"t{index}"]}
            )
            assert made.status_code == 200, made.text
        with statements(engine) as sent:
            found = (await client.get(f"/v1/agents/{agent['id']}")).json()
        read.append(sent)
        assert found["id"] == agent["id"] and found["tags"] == ["a"]
        assert {t["name"] for t in found["tools"]} == {t["name"] for t in agent["tools"]}
    assert Counter(map(shape, read[0])) == Counter(map(shape, read[1]))
    print({"get agent": len(read[1])})


async def test_a_look_at_a_run_costs_the_same_statements_for_2_agents_as_for_20(
    app: FastAPI, client: httpx.AsyncClient, admin: EmulatorAdmin
) -> None:
    # ... at each stage; and it reads none of its items, open steps included: their counts and
    # sums are stored on its provider batches from the moment they are written
    # (store/batch_summaries.py).
    worker: Worker = app.state.nightshift.worker
    runs = Runs(client, worker=app.state.nightshift.worker)
    engine = app.state.nightshift.engine
    stages = ("step 1 running", "step 1 applied, step 2 running", "completed")
    looks: dict[int, dict[str, list[str]]] = {}
    for size in (2, 20):
        agents = [await runs.agent(f"looked-at-{size}-{index}") for index in range(size)]
        run = await runs.start([{"agent_id": a["id"], "input": MESSAGE} for a in agents])
        looks[size] = {}
        for stage in stages:
            with statements(engine) as sent:
                view = (await client.get(f"/v1/messages/batches/{run['id']}")).json()
            looks[size][stage] = sent
            if stage != stages[-1]:
                clock_of(app).advance(worker.poll_interval * 2)
                assert await worker.run_once() == 1
        assert view["status"] == "completed", view
        assert view["progress"]["agents"]["finished"] == size
    for stage in stages:
        assert Counter(map(shape, looks[2][stage])) == Counter(map(shape, looks[20][stage])), stage
    for stage in stages:
        assert not [s for s in looks[20][stage] if "batch_items" in s], (stage, looks[20][stage])
    print({stage: len(looks[20][stage]) for stage in stages})
