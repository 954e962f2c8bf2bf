"""PATCH /v1/messages/batches/{id}/cancel: no further steps, the provider batch cancelled, agents freed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from sqlalchemy import select, update

from integration.batch.kit import by_agent, call, calls_of, say, wait_for
from nightshift.batch.steps import cancel_batch_run
from nightshift.batch.worker import Worker
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator import EmulatorAdmin
from nightshift.store import provider_batches as batch_store
from nightshift.store.tables import provider_batches
from support.api import json_object
from support.clock import clock_of
from support.runs import Runs


async def _cancel(runs: Runs, run_id: str) -> dict[str, Any]:
    return json_object(await runs.client.patch(f"/v1/messages/batches/{run_id}/cancel"))


async def passes(app: FastAPI, count: int = 3) -> None:
    """``count`` passes of the app's worker, each a poll interval after the last."""
    worker: Worker = app.state.nightshift.worker
    for _ in range(count):
        clock_of(app).advance(worker.poll_interval)
        await worker.run_once()


async def test_cancel_an_open_step(runs: Runs, admin: EmulatorAdmin, app: FastAPI) -> None:
    agents = [await runs.agent(f"c{i}") for i in range(2)]
    await admin.configure(polls_to_end=1000)
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    (batch,) = run["progress"]["provider_batches"]
    assert batch["status"] == "running"
    # Let the poller look at it at least once.
    await wait_for(lambda: _polled(runs, run["id"]))

    cancelled = await _cancel(runs, run["id"])
    assert cancelled["status"] == "cancelled"
    assert cancelled["completed_at"] is not None
    assert cancelled["progress"]["agents"] == {"running": 0, "finished": 0, "failed": 0, "cancelled": 2}
    (after,) = cancelled["progress"]["provider_batches"]
    assert after["status"] == "cancelled"
    seen = await admin.requests(path=f"/v1/messages/batches/{batch['provider_batch_id']}/cancel", method="POST")
    assert len(seen) == 1

    calls = len(await admin.model_calls())
    await passes(app)
    later = (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()
    assert later["status"] == "cancelled"
    assert later["progress"] == cancelled["progress"]
    assert later["updated_at"] == cancelled["updated_at"]
    assert len(await admin.model_calls()) == calls
    # The inputs stay; nothing from the cancelled step is applied.
    assert by_agent(await runs.messages(run["id"])) == {a["id"]: ["user"] for a in agents}

    # The agents are free again.
    await admin.configure(polls_to_end=0)
    again = await runs.start([{"agent_id": a["id"], "input": "hello again"} for a in agents])
    done = await runs.wait(again["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 2


async def _polled(runs: Runs, run_id: str) -> bool:
    found = json_object(await runs.client.get(f"/v1/messages/batches/{run_id}"))
    status: str = found["progress"]["provider_batches"][0]["provider_status"]
    return status == "in_progress"


async def test_cancel_between_steps_keeps_what_was_applied(runs: Runs, admin: EmulatorAdmin, app: FastAPI) -> None:
    agent = await runs.agent("two-steps")
    await admin.script(agent["id"], call("conversation_search", heartbeat=True, query="x"), say("never seen"))
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    # The first batch (already submitted) ends at once; the second one stays open.
    await admin.configure(polls_to_end=1000)

    async def second_step_open() -> bool:
        found = (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()
        batches = found["progress"]["provider_batches"]
        # Submitted and polled once: the provider holds the second step's batch.
        return len(batches) == 2 and batches[1]["provider_status"] == "in_progress"

    await wait_for(second_step_open)
    cancelled = await _cancel(runs, run["id"])
    assert cancelled["status"] == "cancelled"
    assert cancelled["progress"]["provider_batches"][0]["status"] == "applied"

    async def settled() -> bool:
        found = (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()
        return [b["status"] for b in found["progress"]["provider_batches"]] == ["applied", "cancelled"]

    await wait_for(settled)
    # Step 0 stays applied; the heartbeat that opened step 1 was written with it; no step 1 answer.
    assert by_agent(await runs.messages(run["id"])) == {agent["id"]: ["user", "assistant", "tool", "user"]}
    assert len(await calls_of(admin, agent["id"])) == 2
    await passes(app)
    assert (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()["status"] == "cancelled"
    assert len(await runs.messages(run["id"])) == 4


async def test_cancel_an_ended_run_changes_nothing(runs: Runs) -> None:
    agent = await runs.agent("finished")
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed"
    after = await _cancel(runs, run["id"])
    assert after["status"] == "completed"
    assert after["completed_at"] == done["completed_at"]


async def test_cancel_an_unknown_run(runs: Runs) -> None:
    response = await runs.client.patch("/v1/messages/batches/batch-nope/cancel")
    assert response.status_code == 404
    assert "batch-nope" in response.json()["detail"]


async def test_a_cancel_racing_the_poller_is_sent_once(runs: Runs, admin: EmulatorAdmin, app: FastAPI) -> None:
    # The interleaving that sent two cancels: the poller holds the batch (mid-poll) when a request
    # cancels the run; then the poller releases what it holds, and takes the batch up again.
    worker: Worker = app.state.nightshift.worker
    agent = await runs.agent("raced")
    await admin.configure(polls_to_end=1000)
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    (batch,) = run["progress"]["provider_batches"]
    await wait_for(lambda: _polled(runs, run["id"]))
    async with worker.engine.begin() as conn:
        await conn.execute(update(provider_batches).values(lease_owner=worker.owner))  # the poller holds it

        request = worker.for_request()
        cancelled = await cancel_batch_run(
            conn, DEFAULT_ORG_ID, run["id"], clock_of(app).now(), lease=request.leases.lease()
        )
        await batch_store.release(conn, batch["id"], worker.owner, next_poll_at=datetime.now(UTC))
        held_by = await conn.scalar(select(provider_batches.c.lease_owner))

    assert cancelled.status.value == "cancelled"
    # The poller's release did not free it: the request, which holds it, is the one that cancels it.
    assert held_by is not None and held_by != worker.owner
    assert held_by.rsplit(":", 1)[0] == worker.owner.rsplit(":", 1)[0]  # the same host and process
