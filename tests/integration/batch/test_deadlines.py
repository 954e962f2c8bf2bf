"""Runs with a deadline: a step's stragglers are taken over through the normal API, each agent's
answer applied once, and what that cost above the batch price shown per provider batch.

The scripted provider holds a share of each batch's requests back for an hour (the emulator's
``held_back_fraction``); the server's clock is the provider's, so letting time pass moves both.
Each agent is told to remember a fact: it saves it (one step), then answers (a second).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.providers.base import ModelRequest
from support.scripted import ScriptedModel
from support.stepped import SteppedRuns

HAIKU = "anthropic/claude-haiku-4-5-20251001"
AGENTS = 20
# The share of a batch's requests held back (picked by a hash of the agent's random id, the same
# agents at every step): of 20 agents, some and not all but once in half a million runs.
HELD_BACK = 0.5
HOUR = 3_600.0


class ProviderClock:
    """The server's clock read from the scripted provider's, so that both move together."""

    def __init__(self, model: ScriptedModel) -> None:
        self._state = model.state

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._state.now(), UTC)

    def monotonic(self) -> float:
        return time.monotonic() + (self._state.now() - time.time())


async def taken_over_metric(runs: SteppedRuns, *, route: str) -> float:
    """``nightshift_taken_over_requests_total`` of ``route``, as ``/metrics`` shows it."""
    text = (await runs.client.get("/metrics")).text
    found = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "nightshift_taken_over_requests_total" and sample.labels.get("route") == route
    ]
    return sum(found)


@pytest.fixture
async def timed(settings: Settings, scripted: ScriptedModel) -> AsyncIterator[SteppedRuns]:
    """Runs stepped by the test over a provider that holds half of each batch back an hour."""
    scripted.configure(held_back_fraction=HELD_BACK, held_back_seconds=HOUR)
    quiet = settings.model_copy(update={"poller": False, "poll_interval_seconds": 30.0, "poll_min_seconds": 5.0})
    app: FastAPI = create_app(quiet, providers=scripted.providers(), clock=ProviderClock(scripted))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as http:
            yield SteppedRuns(http, app.state.nightshift.worker, scripted)


async def fleet(runs: SteppedRuns, model: str = HAIKU) -> list[dict[str, Any]]:
    return [await runs.agent(f"keeper-{i}", model=model) for i in range(AGENTS)]


def remember(agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"agent_id": a["id"], "input": f"remember that my name is Ana {a['name']}"} for a in agents]


async def drive(runs: SteppedRuns, run_id: str, *, every: float, until: float) -> tuple[dict[str, Any], float]:
    """Passes ``every`` seconds apart on the shared clock until the run is over or ``until``
    seconds have passed; returns the run and the seconds it took."""
    started = runs.model.state.now()
    while True:
        await runs.step()
        run = await runs.run(run_id)
        elapsed = runs.model.state.now() - started
        if run["status"] not in ("created", "running") or elapsed >= until:
            return run, elapsed
        runs.model.state.advance(every)


async def check_applied_once(runs: SteppedRuns, agents: list[dict[str, Any]]) -> None:
    """Each agent saved its fact once and answered it once."""
    for agent in agents:
        fact = f"Ana {agent['name']}"
        human = (await runs.client.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")).json()
        assert human["value"].count(fact) == 1, human["value"]
        messages = (await runs.client.get(f"/v1/agents/{agent['id']}/messages", params={"limit": 100})).json()
        asked = next(i for i, m in enumerate(messages) if fact in str(m.get("content")))  # newest first
        kinds = [m["message_type"] for m in messages[:asked]]
        assert kinds.count("tool_call_message") == 1, kinds  # the memory edit
        assert kinds.count("assistant_message") == 1, kinds  # the answer


async def test_a_deadline_run_takes_over_its_stragglers_and_applies_each_agent_once(timed: SteppedRuns) -> None:
    agents = await fleet(timed)
    run = await timed.start(remember(agents), finish_within_seconds=600)
    assert run["deadline"] is not None

    done, took = await drive(timed, run["id"], every=10, until=HOUR)
    assert done["status"] == "completed", done
    assert took <= 600, took
    assert done["progress"]["agents"]["finished"] == AGENTS
    await check_applied_once(timed, agents)

    # Each step's batch was cancelled for its stragglers, which went through the normal API once.
    batches = done["progress"]["provider_batches"]
    assert [b["step_number"] for b in batches] == [0, 1]
    assert all(b["takeover_at"] is not None and b["provider_status"] == "ended" for b in batches), batches
    taken_over = sum(b["taken_over"] for b in batches)
    assert 0 < taken_over < 2 * AGENTS
    assert len(timed.model.normal_requests()) == taken_over
    assert await taken_over_metric(timed, route="normal") == taken_over
    # Each request says whether it was taken over; such a request cost more than a batch one.
    requests = [
        r
        for a in (await timed.client.get(f"/v1/messages/batches/{run['id']}/agents")).json()["agents"]
        for r in a["requests"]
    ]
    assert sum(r["taken_over"] for r in requests) == taken_over
    # What that cost above the batch price: the normal price is twice the batch's.
    assert all(b["takeover_usd"] > 0 for b in batches if b["taken_over"])
    assert done["progress"]["takeover_usd"] == pytest.approx(sum(b["takeover_usd"] for b in batches), abs=1e-5)
    assert 0 < done["progress"]["takeover_usd"] < done["progress"]["cost_usd"]

    # The held-back requests were cancelled at the provider: an hour later nothing more comes.
    timed.model.state.advance(2 * HOUR)
    assert await timed.step() == 0
    later = await timed.run(run["id"])
    assert later["progress"]["cost_usd"] == done["progress"]["cost_usd"]
    await check_applied_once(timed, agents)


async def test_without_a_deadline_a_run_waits_for_its_stragglers(timed: SteppedRuns) -> None:
    agents = await fleet(timed)
    run = await timed.start(remember(agents))
    assert run["deadline"] is None

    waiting, _ = await drive(timed, run["id"], every=30, until=1_800)
    assert waiting["status"] == "running"
    assert waiting["progress"]["step"] == 0  # the first step still waits on its held-back requests

    done, took = await drive(timed, run["id"], every=60, until=3 * HOUR)
    assert done["status"] == "completed", done
    assert took > HOUR
    await check_applied_once(timed, agents)
    assert timed.model.normal_requests() == []
    assert done["progress"]["takeover_usd"] == 0
    assert all(b["takeover_at"] is None and b["taken_over"] == 0 for b in done["progress"]["provider_batches"])


async def test_a_crash_in_the_middle_of_a_take_over_applies_each_agent_once(timed: SteppedRuns) -> None:
    agents = await fleet(timed)
    crashed: list[str] = []

    def crash_once(custom_id: str | None, request: ModelRequest) -> None:
        """The run's second normal call brings the worker down (an error no stage expects)."""
        if custom_id is None and len(timed.model.normal_requests()) == 2 and not crashed:
            crashed.append(request.messages[-1].text or "")
            raise RuntimeError("the worker died")

    timed.model.answer_with(crash_once)
    run = await timed.start(remember(agents), finish_within_seconds=600)
    done, took = await drive(timed, run["id"], every=10, until=HOUR)
    assert crashed, "the take-over never crashed"
    assert done["status"] == "completed", done
    assert took <= 600, took  # the failed stage was tried again after its backoff, in time
    await check_applied_once(timed, agents)

    # The answer stored before the crash was kept: only the crashed request was sent again.
    assert len(timed.model.normal_requests()) == sum(b["taken_over"] for b in done["progress"]["provider_batches"]) + 1


@pytest.mark.settings(poll_interval_seconds=30.0)
async def test_openai_stragglers_go_through_flex_at_the_batch_price(timed: SteppedRuns) -> None:
    agents = await fleet(timed, model="openai/gpt-5-mini")
    run = await timed.start(remember(agents), finish_within_seconds=600)
    done, _ = await drive(timed, run["id"], every=10, until=HOUR)
    assert done["status"] == "completed", done
    await check_applied_once(timed, agents)
    calls = timed.model.normal_requests()
    assert calls and all(request.flex for request in calls)
    assert sum(b["taken_over"] for b in done["progress"]["provider_batches"]) == len(calls)
    assert await taken_over_metric(timed, route="flex") == len(calls)
    assert done["progress"]["takeover_usd"] == 0  # flex bills at the batch price


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"deadline": "2020-01-01T00:00:00Z"}, "deadline"),
        ({"deadline": "2999-01-01T00:00:00"}, "deadline"),  # no time zone
        ({"finish_within_seconds": 0}, "finish_within_seconds"),
        ({"finish_within_seconds": 1e300}, "finish_within_seconds"),  # past any date a server can hold
        ({"deadline": "2999-01-01T00:00:00Z", "finish_within_seconds": 60}, "deadline"),
    ],
)
async def test_a_bad_deadline_is_refused_and_nothing_is_made(
    timed: SteppedRuns, extra: dict[str, Any], field: str
) -> None:
    (agent,) = [await timed.agent("keeper")]
    body = {"requests": [{"agent_id": agent["id"], "messages": [{"role": "user", "content": "hi"}]}], **extra}
    response = await timed.client.post("/v1/messages/batches", json=body)
    assert response.status_code == 422, response.text
    assert field in response.text
    assert (await timed.client.get("/v1/messages/batches")).json() == []
