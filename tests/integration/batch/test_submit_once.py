"""A provider batch is submitted once: after a crash it is found at the provider and adopted.

The crash is simulated in the only place it matters: the intent to submit is recorded, the
provider accepts the batch, and the answer never reaches us. The test submits that batch
itself (as the lost attempt did) and lets the poller try again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from nightshift.batch.worker import Worker
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import HttpFault
from nightshift.providers.base import ModelRequest
from nightshift.providers.clients import DEFAULT_MAX_RETRIES, ProviderSet
from nightshift.store.db import opened
from nightshift.store.tables import provider_batches
from support.clock import ManualClock, clock_of
from support.runs import ANTHROPIC_MODEL, GEMINI_MODEL, OPENAI_MODEL, Runs
from support.submit import submit_requests

MODELS = {"anthropic": ANTHROPIC_MODEL, "openai": OPENAI_MODEL, "google_ai": GEMINI_MODEL}
CREATE = {
    "anthropic": "/v1/messages/batches",
    "openai": "/v1/batches",
    "google_ai": "/v1beta/models/gemini-2.5-flash:batchGenerateContent",
}


@pytest.fixture
def clock() -> ManualClock:
    """The app's clock, from the machine's time: a batch is adopted when the provider created it
    after the intent to submit, and the provider (the emulator) stamps its batches by the machine's
    clock, as a real provider stamps them by its own."""
    return ManualClock(start=datetime.now(UTC))


async def _provider_batches(db_url: str) -> list[Any]:
    async with opened(db_url) as engine:
        async with engine.connect() as conn:
            return list(await conn.execute(select(provider_batches)))


@pytest.mark.settings(error_backoff_seconds=600)
@pytest.mark.parametrize("provider", ["anthropic", "openai", "google_ai"])
async def test_a_batch_the_provider_took_before_a_crash_is_adopted(
    runs: Runs, admin: EmulatorAdmin, db_url: str, provider: str, clock: ManualClock
) -> None:
    agents = [await runs.agent(f"once-{i}", model=MODELS[provider]) for i in range(3)]
    # The first submission fails (as a crash would end it): the intent is recorded, then nothing.
    # Google's API has no "do not retry" header: its SDK tries every attempt it is given.
    attempts = DEFAULT_MAX_RETRIES + 1 if provider == "google_ai" else 1
    await admin.fault(HttpFault(path=CREATE[provider], method="POST", status=500, count=attempts, should_retry=False))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    assert run["status"] == "created", run
    ours = run["progress"]["provider_batches"][0]["id"]
    (row,) = await _provider_batches(db_url)
    assert row.submit_started_at is not None and row.submit_attempts == 1

    # What the lost attempt got to the provider (twice, where a tag tells the copies apart).
    copies = 1 if provider == "anthropic" else 2
    async with ProviderSet() as providers:
        requests = {
            a["id"]: ModelRequest(model=MODELS[provider].split("/")[1], system="s", messages=()) for a in agents
        }
        sent = [await submit_requests(providers.get(provider), requests, tag=ours) for _ in range(copies)]
    creates_before = len(await admin.requests(path=CREATE[provider], method="POST"))
    clock.advance(600)  # the retry delay passes

    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    (batch,) = done["progress"]["provider_batches"][:1]
    assert batch["provider_batch_id"] == sent[0]  # adopted, not sent again
    assert batch["duplicates"] == sent[1:]  # a second copy is cancelled at once
    assert len(await admin.requests(path=CREATE[provider], method="POST")) == creates_before  # nothing sent again
    (row,) = await _provider_batches(db_url)
    assert row.submit_attempts == 1


@pytest.mark.settings(error_backoff_seconds=600)
async def test_a_worker_takes_only_batches_of_the_endpoint_it_reaches(
    runs: Runs, admin: EmulatorAdmin, db_url: str, emulator: str, app: FastAPI
) -> None:
    worker: Worker = app.state.nightshift.worker
    agent = await runs.agent("elsewhere")
    await admin.fault(HttpFault(path=CREATE["anthropic"], method="POST", status=500, should_retry=False))
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    batch_id = run["progress"]["provider_batches"][0]["id"]
    # As if another server, talking to another Anthropic endpoint, had written this step.
    async with opened(db_url) as engine:
        async with engine.begin() as conn:
            (endpoint,) = await conn.scalars(select(provider_batches.c.endpoint))
            assert endpoint == emulator
            await conn.execute(
                update(provider_batches)
                .where(provider_batches.c.id == batch_id)
                .values(endpoint="https://anthropic.example", next_poll_at=datetime.now(UTC))
            )
        for _ in range(3):  # passes of the worker, each a poll interval after the last: none takes it
            clock_of(app).advance(worker.poll_interval)
            assert await worker.run_once() == 0
            assert (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()["status"] == "created"
        assert await admin.requests(path=CREATE["anthropic"], method="POST") == []

        async with engine.begin() as conn:
            await conn.execute(update(provider_batches).values(endpoint=emulator))
    clock_of(app).advance(600)  # the retry delay passes
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done


@pytest.mark.settings(error_backoff_seconds=600)
async def test_a_batch_of_the_same_size_is_not_taken_for_ours(
    runs: Runs, admin: EmulatorAdmin, db_url: str, clock: ManualClock
) -> None:
    # Anthropic's batches carry no tag: another batch of the same size, in flight when ours was
    # lost, looks like ours until its custom ids can be read (once it has ended).
    agents = [await runs.agent(f"mine-{i}") for i in range(3)]
    await admin.fault(HttpFault(path=CREATE["anthropic"], method="POST", status=500, should_retry=False))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    await admin.configure(polls_to_end=3)
    async with ProviderSet() as providers:
        request = ModelRequest(model="claude-3-5-haiku-20241022", system="s", messages=())
        decoy = await submit_requests(
            providers.get("anthropic"), {f"someone-else-{i}": request for i in range(3)}, tag="llm_batch-another"
        )
    clock.advance(600)  # the retry delay passes

    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 3
    (batch,) = done["progress"]["provider_batches"]
    assert batch["provider_batch_id"] not in (None, decoy)  # it waited for the decoy to end, then sent its own
