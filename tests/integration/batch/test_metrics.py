"""``GET /metrics`` as a run steps: scraped before, during and after, on SQLite and PostgreSQL.

The poller is off: each test drives the worker (``run_once``, what the poller does every pass) so
that it can scrape between the stages. The text is read with prometheus-client's own parser.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from integration.batch.kit import RAISING_TOOL, call, say
from nightshift.api.app import create_app
from nightshift.api.deps import AppState
from nightshift.config import Settings
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import HttpFault
from nightshift.providers.clients import DEFAULT_MAX_RETRIES
from support.api import create_tool, json_object
from support.clock import ManualClock, clock_of
from support.runs import ANTHROPIC_MODEL, LOOKUP_TOOL, Runs
from support.statements import statements

pytestmark = pytest.mark.settings(poller=False)

PROVIDER, MODEL = ANTHROPIC_MODEL.split("/", 1)
TOKEN_KINDS = {"input": "input_tokens", "output": "output_tokens", "cache_read": "cache_read_tokens"}
TOKEN_KINDS["cache_write"] = "cache_write_tokens"
STAGES = ("submit", "poll", "apply", "cancel")


class Scrape:
    """One answer of ``GET /metrics``, parsed: a sample's value by its name and labels."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[sample.name, frozenset(sample.labels.items())] = sample.value

    def __call__(self, name: str, **labels: str) -> float:
        """The sample's value; 0 for a labelled series never recorded (prometheus-client leaves it out)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def stages(self) -> dict[str, float]:
        """How many stages of each kind of the provider's batches this process did."""
        return {s: self("nightshift_stage_duration_seconds_count", stage=s, provider=PROVIDER) for s in STAGES}

    def cluster(self) -> dict[str, float]:
        """The cluster-wide gauges, read from the database."""
        return {
            name: value
            for (name, _), value in self.samples.items()
            if name in ("nightshift_runs", "nightshift_provider_batches", "nightshift_agents_stepping")
        }


async def scrape(client: httpx.AsyncClient) -> Scrape:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape(response.text)


def state_of(app: FastAPI) -> AppState:
    state: AppState = app.state.nightshift
    return state


async def drive(app: FastAPI, runs: Runs, run_id: str) -> dict[str, Any]:
    """Do what the poller does, in ``app``'s worker, until the run ends; returns the run."""
    worker = state_of(app).worker
    for _ in range(500):
        run = json_object(await runs.client.get(f"/v1/messages/batches/{run_id}"))
        if run["status"] not in ("created", "running"):
            return run
        await worker.run_once()
        clock_of(app).advance(worker.poll_interval)  # a step just submitted is due a poll interval later
    raise AssertionError(f"run {run_id} did not end: {run['progress']}")


async def test_metrics_move_as_a_run_steps(app: FastAPI, runs: Runs, admin: EmulatorAdmin) -> None:
    client = runs.client
    engine = state_of(app).engine
    with statements(engine) as empty_scrape:
        before = await scrape(client)
    assert before.stages() == dict.fromkeys(STAGES, 0.0)
    assert before("nightshift_runs", status="completed") == 0
    assert before("nightshift_sandbox_calls_total") == 0
    assert before("nightshift_poller_lag_seconds") == 0

    await create_tool(client, LOOKUP_TOOL)
    await create_tool(client, RAISING_TOOL)
    lookers = [await runs.agent(f"looker-{i}", tools=["lookup_order"]) for i in range(2)]
    unlucky = await runs.agent("unlucky", tools=["flaky_lookup"])
    refused = await runs.agent("refused")
    await admin.configure(errors={refused["id"]: "invalid_request_error"})
    for agent in lookers:
        await admin.script(agent["id"], call("lookup_order", heartbeat=True, order_id="12"), say("it shipped"))
    await admin.script(unlucky["id"], call("flaky_lookup", heartbeat=True, order_id="12"), say("sorry"))
    agents = [*lookers, unlucky, refused]
    run = await runs.start([{"agent_id": a["id"], "input": "where is order 12?"} for a in agents])

    # The request submitted the first step: one provider batch at the provider, every agent in it.
    submitted = await scrape(client)
    assert submitted("nightshift_runs", status="running") == 1
    assert submitted("nightshift_provider_batches", status="running") == 1
    assert submitted("nightshift_agents_stepping") == len(agents)
    assert submitted.stages() == {"submit": 1, "poll": 0, "apply": 0, "cancel": 0}
    assert submitted("nightshift_stage_duration_seconds_sum", stage="submit", provider=PROVIDER) > 0
    # The batch is due a poll interval (0.05 s) after its submission, and no poller runs: it waits.
    clock_of(app).advance(0.25)
    assert (await scrape(client))("nightshift_poller_lag_seconds") >= 0.2

    done = await drive(app, runs, run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["failed"] == 1  # the refused request
    with statements(engine) as full_scrape:
        after = await scrape(client)

    # Two steps (the refused agent stops at the first), each submitted, polled and applied here.
    assert after.stages() == {"submit": 2, "poll": 2, "apply": 2, "cancel": 0}
    assert after("nightshift_runs", status="completed") == 1
    assert after("nightshift_runs", status="running") == 0
    assert after("nightshift_provider_batches", status="applied") == 2
    assert after("nightshift_provider_batches", status="running") == 0
    assert after("nightshift_agents_stepping") == 0
    assert after("nightshift_poller_lag_seconds") == 0
    # Three custom tool calls, one of which raised.
    assert after("nightshift_sandbox_calls_total") == 3
    assert after("nightshift_sandbox_failures_total") == 1
    assert (
        after("nightshift_provider_errors_total", provider=PROVIDER, kind="invalid_request_error", scope="request") == 1
    )
    # The tokens and cost are the run's own, as its progress reports them.
    usage = done["progress"]["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    for kind, key in TOKEN_KINDS.items():
        assert after(
            "nightshift_tokens_total", provider=PROVIDER, model=MODEL, kind=kind, run_kind="main"
        ) == usage.get(key, 0), kind
    assert done["progress"]["cost_usd"] > 0
    assert after("nightshift_cost_usd_total", provider=PROVIDER, model=MODEL, run_kind="main") == pytest.approx(
        done["progress"]["cost_usd"], abs=1e-6
    )
    # Reading the cluster's figures costs the same few statements, whatever is in the database.
    assert len(empty_scrape) == len(full_scrape) == 3, full_scrape


@asynccontextmanager
async def second_process(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """Another app on the same database, as a second server process would be."""
    application = create_app(settings, clock=ManualClock())
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://second.test") as http:
            yield application, http


async def test_two_processes_count_their_own_work_and_see_the_same_cluster(
    app: FastAPI, runs: Runs, admin: EmulatorAdmin, settings: Settings
) -> None:
    agents = [await runs.agent(f"agent-{i}") for i in range(2)]
    for agent in agents:
        await admin.script(agent["id"], say("done"))
    async with second_process(settings) as (other, other_client):
        # This process takes the request (and submits); the other one polls and applies.
        run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
        done = await drive(other, Runs(other_client), run["id"])
        assert done["status"] == "completed", done
        mine, theirs = await scrape(runs.client), await scrape(other_client)

    assert mine.stages() == {"submit": 1, "poll": 0, "apply": 0, "cancel": 0}
    assert theirs.stages() == {"submit": 0, "poll": 1, "apply": 1, "cancel": 0}
    output = done["progress"]["usage"]["output_tokens"]
    assert mine("nightshift_tokens_total", provider=PROVIDER, model=MODEL, kind="output", run_kind="main") == 0
    assert theirs("nightshift_tokens_total", provider=PROVIDER, model=MODEL, kind="output", run_kind="main") == output
    # The cluster's figures come from the shared database: the same in both.
    assert mine.cluster() == theirs.cluster()
    assert mine("nightshift_runs", status="completed") == 1
    assert mine("nightshift_provider_batches", status="applied") == 1


@pytest.mark.settings(error_backoff_seconds=0.05)
async def test_failed_provider_calls_are_counted_by_kind(app: FastAPI, runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("patient")
    await admin.script(agent["id"], say("done"))
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    # The first poll meets an overloaded provider, its SDK's retries included; the next one gets through.
    await admin.fault(
        HttpFault(path="/v1/messages/batches/*", method="GET", status=529, count=1 + DEFAULT_MAX_RETRIES, retry_after=0)
    )
    done = await drive(app, runs, run["id"])
    assert done["status"] == "completed", done

    after = await scrape(runs.client)
    assert after("nightshift_provider_errors_total", provider=PROVIDER, kind="overloaded_error", scope="call") == 1
    assert after.stages() == {"submit": 1, "poll": 1, "apply": 1, "cancel": 0}
