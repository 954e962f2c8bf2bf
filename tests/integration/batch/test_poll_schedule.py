"""Running provider batches are polled on the schedule of ``domain/polling.py``: often while
young, by the turnaround their provider's batches showed (read from the store), within
NIGHTSHIFT_POLL_MIN_SECONDS and NIGHTSHIFT_POLL_INTERVAL_SECONDS; the poller's next pass is when
the first batch is due. Over the scripted provider, stepped by explicit passes on a manual clock;
the last test lets a live poller step a run through the emulator.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import orjson
import pytest

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.domain.batches import ProviderBatch
from nightshift.emulator import EmulatorAdmin
from nightshift.store import provider_batches as batch_store
from support.api import json_object
from support.clock import ManualClock
from support.orgs import new_organization_key
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL, Runs
from support.scripted import ScriptedModel, call, say
from support.stepped import SteppedRuns

SHORTEST = 5.0
LONGEST = 3_600.0
# The turnaround of the batches that end in the second test: submit to end, as the clock says.
TURNAROUND = 600.0
# The slack of a gap read back: the manual clock runs on between two readings.
SLACK = timedelta(seconds=2)

pytestmark = pytest.mark.settings(poller=False, poll_interval_seconds=LONGEST, poll_min_seconds=SHORTEST)


@pytest.fixture
async def stepped(settings: Settings, clock: ManualClock) -> AsyncIterator[SteppedRuns]:
    model = ScriptedModel()
    application = create_app(settings, clock=clock, providers=model.providers())
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as http:
            yield SteppedRuns(http, application.state.nightshift.worker, model)


async def held_run(
    stepped: SteppedRuns, name: str, model: str = ANTHROPIC_MODEL
) -> tuple[dict[str, Any], ProviderBatch]:
    """A one-agent run whose provider batch stays in progress; and that batch, as stored."""
    agent = await stepped.agent(name, model=model)
    stepped.model.script(agent["id"], say("hello"))
    with stepped.model.holding():
        run = await stepped.start([{"agent_id": agent["id"], "input": "hello"}])
    return run, await stored_batch(stepped, run["id"])


async def stored_batch(stepped: SteppedRuns, run_id: str) -> ProviderBatch:
    async with stepped.worker.engine.connect() as conn:
        (batch,) = await batch_store.provider_batches_of_run(conn, run_id)
    return batch


def gap(batch: ProviderBatch, expected: float) -> None:
    """The batch is due ``expected`` seconds after its last poll (its submit, before any)."""
    assert batch.next_poll_at is not None
    since = batch.polled_at or batch.submit_started_at
    assert since is not None
    assert abs(batch.next_poll_at - since - timedelta(seconds=expected)) <= SLACK, (batch.next_poll_at, since)


async def test_a_young_batch_is_polled_often_then_less_as_it_ages(stepped: SteppedRuns, clock: ManualClock) -> None:
    _, batch = await held_run(stepped, "young")
    gap(batch, SHORTEST)  # the first poll: the shortest gap after its submit
    assert SHORTEST - 1 <= await stepped.worker.next_pass_in() <= SHORTEST

    clock.advance(100)
    assert await stepped.step() == 1
    polled = await stored_batch(stepped, batch.batch_run_id)
    gap(polled, 100 * 0.2)  # a fifth of its age
    # Not due before then: a pass does nothing, and the poller's next pass is set for it.
    clock.advance(10)
    assert await stepped.step() == 0
    assert 8 <= await stepped.worker.next_pass_in() <= 10 + SLACK.total_seconds()
    clock.advance(10 + SLACK.total_seconds())  # past the gap, whatever the clock's own running added to it
    assert await stepped.step() == 1

    clock.advance(LONGEST * 10)  # ten hours old: the longest gap
    assert await stepped.step() == 1
    gap(await stored_batch(stepped, batch.batch_run_id), LONGEST)


async def test_the_observed_turnaround_brings_the_polls_to_where_batches_end(
    stepped: SteppedRuns, clock: ManualClock
) -> None:
    for index in range(5):
        run, _ = await held_run(stepped, f"seen-{index}")
        clock.advance(TURNAROUND)
        stepped.model.release()
        done = await stepped.finish(run["id"])
        assert done["status"] == "completed", done

    # Just before the usual end, a batch is polled as it comes instead of a fifth of its age later.
    _, batch = await held_run(stepped, "watched")
    clock.advance(TURNAROUND - 10)
    assert await stepped.step() == 1
    gap(await stored_batch(stepped, batch.batch_run_id), 10)

    # Each end was counted where Prometheus reads it, with its turnaround.
    metrics = (await stepped.client.get("/metrics")).text
    lines = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if not line.startswith("#"))
    count = float(lines['nightshift_provider_batch_turnaround_seconds_count{provider="anthropic"}'])
    total = float(lines['nightshift_provider_batch_turnaround_seconds_sum{provider="anthropic"}'])
    assert count == 5
    assert TURNAROUND * 5 <= total <= TURNAROUND * 5 + 30

    # The API shows the organization's turnarounds; another organization has none of them.
    # By provider, and by model for the batches of one model (all of these).
    seen = json_object(await stepped.client.get("/v1/messages/batches/turnaround"))
    (shown,), (by_model,) = seen["providers"], seen["models"]
    assert (shown["provider"], shown["ended"]) == ("anthropic", 5)
    for name in ("p10_seconds", "p50_seconds", "p90_seconds"):
        assert TURNAROUND <= shown[name] <= TURNAROUND + 30, shown  # (the clock runs on between the two)
    assert by_model == {**shown, "model": ANTHROPIC_MODEL.split("/", 1)[1]}
    other = await new_organization_key(stepped.worker.engine)
    theirs = await stepped.client.get("/v1/messages/batches/turnaround", headers={"authorization": f"Bearer {other}"})
    assert json_object(theirs) == {"providers": [], "models": []}


async def test_a_provider_with_few_ends_shows_them_without_a_spread(stepped: SteppedRuns, clock: ManualClock) -> None:
    assert json_object(await stepped.client.get("/v1/messages/batches/turnaround")) == {"providers": [], "models": []}
    run, _ = await held_run(stepped, "once")
    clock.advance(TURNAROUND)
    stepped.model.release()
    assert (await stepped.finish(run["id"]))["status"] == "completed"
    shown = json_object(await stepped.client.get("/v1/messages/batches/turnaround"))
    spread = {"ended": 1, "p10_seconds": None, "p50_seconds": None, "p90_seconds": None}
    model = ANTHROPIC_MODEL.split("/", 1)[1]
    assert shown == {
        "providers": [{"provider": "anthropic", **spread}],
        "models": [{"provider": "anthropic", "model": model, **spread}],
    }


@pytest.mark.settings(poll_min_seconds=LONGEST * 2)
async def test_a_shortest_gap_over_the_interval_polls_at_the_interval(stepped: SteppedRuns, clock: ManualClock) -> None:
    _, batch = await held_run(stepped, "fixed")
    gap(batch, LONGEST)
    assert await stepped.worker.next_pass_in() == LONGEST
    clock.advance(LONGEST)
    assert await stepped.step() == 1
    gap(await stored_batch(stepped, batch.batch_run_id), LONGEST)


@pytest.mark.settings(poller=True, poll_interval_seconds=LONGEST, poll_min_seconds=0.05)
async def test_a_live_poller_finds_batches_that_end_in_seconds_under_an_hour_long_interval(
    runs: Runs, admin: EmulatorAdmin
) -> None:
    """The poller on the app's loop, the emulator for provider: each batch ends at its third poll.
    At the interval alone the run would take hours; the schedule and the poller's pass at the
    first due batch finish it in the time of a few short gaps."""
    await admin.configure(polls_to_end=3)
    agents = [await runs.agent(f"quick-{i}") for i in range(3)]
    for agent in agents:
        await admin.script(agent["id"], call("core_memory_append", heartbeat=True, label="human", content="hi"))
    run = await runs.start([{"agent_id": a["id"], "input": "remember"} for a in agents])
    done = await runs.wait(run["id"], timeout=LONGEST / 60)
    assert done["status"] == "completed", done
    assert [b["step_number"] for b in done["progress"]["provider_batches"]] == [0, 1]


# OpenAI's batch webhooks: a signed word that a batch ended makes it due at once.

WEBHOOK = "/v1/webhooks/openai"


@pytest.fixture
def webhook_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """The secret OpenAI gives for a webhook endpoint, as the server reads it."""
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", secret)
    return secret


def signed(secret: str, event_type: str, batch_id: str) -> tuple[bytes, dict[str, str]]:
    """An event as OpenAI sends it: the body, and the Standard Webhooks headers signing it."""
    sent = int(time.time())
    body = orjson.dumps({"id": f"evt_{secrets.token_hex(8)}", "object": "event", "created_at": sent,
                         "type": event_type, "data": {"id": batch_id}})  # fmt: skip
    message_id = f"wh_{secrets.token_hex(8)}"
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{message_id}.{sent}.".encode() + body, hashlib.sha256).digest()
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(sent),
        "webhook-signature": f"v1,{base64.b64encode(digest).decode()}",
        "content-type": "application/json",
    }
    return body, headers


async def test_a_signed_batch_webhook_makes_its_batch_due_at_once(
    stepped: SteppedRuns, webhook_secret: str, clock: ManualClock
) -> None:
    _, batch = await held_run(stepped, "hooked", model=OPENAI_MODEL)
    assert batch.provider_batch_id is not None
    clock.advance(SHORTEST * 2)
    assert await stepped.step() == 1  # polled: still in progress, next due a while later
    assert await stepped.step() == 0

    # Refused: no signature, another secret's, or a stale one; nothing changes.
    body, headers = signed(webhook_secret, "batch.completed", batch.provider_batch_id)
    assert (await stepped.client.post(WEBHOOK, content=body)).status_code == 401
    _, theirs = signed("whsec_" + base64.b64encode(b"x" * 32).decode(), "batch.completed", batch.provider_batch_id)
    assert (await stepped.client.post(WEBHOOK, content=body, headers=theirs)).status_code == 401
    stale = {**headers, "webhook-timestamp": str(int(time.time()) - 3_600)}
    assert (await stepped.client.post(WEBHOOK, content=body, headers=stale)).status_code == 401
    # Taken and ignored: an event of something else, a batch nightshift does not know.
    for other in (signed(webhook_secret, "response.completed", batch.provider_batch_id),
                  signed(webhook_secret, "batch.completed", "batch_unknown")):  # fmt: skip
        assert (await stepped.client.post(WEBHOOK, content=other[0], headers=other[1])).status_code == 204
    assert await stepped.step() == 0

    # The batch's own event, without the credentials the rest of the API wants: due at once.
    stepped.model.release()
    answered = await stepped.client.post(WEBHOOK, content=body, headers={**headers, "authorization": ""})
    assert answered.status_code == 204, answered.text
    assert await stepped.step() == 1
    assert (await stored_batch(stepped, batch.batch_run_id)).status.value in ("ended", "applied")


async def test_a_webhook_while_a_poller_holds_the_batch_is_kept_when_it_lets_go(
    stepped: SteppedRuns, webhook_secret: str, clock: ManualClock
) -> None:
    """The webhook comes between a poll that found the batch running and the lease given back
    (or between its submit and the lease given back): the batch stays due at once, not at the
    schedule's next poll an hour on. The next poll spends the webhook."""
    _, batch = await held_run(stepped, "early", model=OPENAI_MODEL)
    assert batch.provider_batch_id is not None
    clock.advance(SHORTEST * 2)
    leases = stepped.worker.leases
    endpoints = stepped.worker.parts.providers.endpoints()
    async with stepped.worker.engine.begin() as conn:
        (held,) = await batch_store.claim_due(
            conn, leases.owner, clock.now(), lease_seconds=60, limit=1, endpoints=endpoints
        )
    body, headers = signed(webhook_secret, "batch.completed", batch.provider_batch_id)
    assert (await stepped.client.post(WEBHOOK, content=body, headers=headers)).status_code == 204
    await leases.release(held, delay=timedelta(seconds=LONGEST))

    # Due at once; its provider says it still runs (the event came early), so it is due again on
    # the schedule, not at every pass.
    assert await stepped.step() == 1
    assert await stepped.step() == 0
    stepped.model.release()
    clock.advance(LONGEST)
    assert await stepped.step() == 1
    assert (await stored_batch(stepped, batch.batch_run_id)).status.value in ("ended", "applied")


async def test_without_a_secret_no_webhook_is_taken(stepped: SteppedRuns, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_WEBHOOK_SECRET", raising=False)
    body, headers = signed("whsec_" + base64.b64encode(b"y" * 32).decode(), "batch.completed", "batch_1")
    refused = await stepped.client.post(WEBHOOK, content=body, headers=headers)
    assert refused.status_code == 404 and "OPENAI_WEBHOOK_SECRET" in refused.text


@pytest.mark.settings(poller=True, poll_interval_seconds=LONGEST, poll_min_seconds=LONGEST)
async def test_a_webhook_wakes_a_live_poller(runs: Runs, admin: EmulatorAdmin, webhook_secret: str) -> None:
    """Batches polled once an hour: each step goes on when its webhook comes (PostgreSQL's NOTIFY,
    SQLite's look for due batches)."""
    agent = await runs.agent("woken", model=OPENAI_MODEL)
    await admin.script(agent["id"], call("core_memory_append", heartbeat=True, label="human", content="hi"))
    run = await runs.start([{"agent_id": agent["id"], "input": "remember"}])
    for step in (0, 1):
        provider_batch_id = await submitted(runs, run["id"], step)
        body, headers = signed(webhook_secret, "batch.completed", provider_batch_id)
        assert (await runs.client.post(WEBHOOK, content=body, headers=headers)).status_code == 204
    done = await runs.wait(run["id"], timeout=LONGEST / 60)
    assert done["status"] == "completed", done


async def submitted(runs: Runs, run_id: str, step: int) -> str:
    """The provider's id of the run's batch of ``step``, once it is submitted."""
    deadline = asyncio.get_running_loop().time() + LONGEST / 60
    while True:
        current = json_object(await runs.client.get(f"/v1/messages/batches/{run_id}"))
        for batch in current["progress"]["provider_batches"]:
            if batch["step_number"] == step and batch["status"] == "running" and batch["provider_batch_id"]:
                return str(batch["provider_batch_id"])
        assert asyncio.get_running_loop().time() < deadline, current["progress"]
        await asyncio.sleep(0.05)
