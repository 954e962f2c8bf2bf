"""A run between its POST and its first step (queued, ``batch/run_queue.py``): it holds its agents,
it may be cancelled, its agents may be deleted. No poller runs: the test starts the queued runs
with the app's worker, as a poller's pass does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch.run_queue import watch_queue
from nightshift.batch.worker import Worker
from nightshift.store.db import opened
from nightshift.store.tables import agents
from support.api import json_object
from support.databases import sqlite_only
from support.runs import Runs

pytestmark = pytest.mark.settings(poller=False)

POST = "/v1/messages/batches"


async def queue(client: httpx.AsyncClient, agents: list[dict[str, Any]]) -> dict[str, Any]:
    response = await client.post(POST, json={"requests": [{"agent_id": a["id"], "input": "hello"} for a in agents]})
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


def worker_of(app: FastAPI) -> Worker:
    worker: Worker = app.state.nightshift.worker
    return worker


async def test_a_queued_run_holds_its_agents_from_its_post(runs: Runs) -> None:
    ada = await runs.agent("ada")
    run = await queue(runs.client, [ada])
    assert (run["status"], run["progress"]["provider_batches"], run["error"]) == ("created", [], None)
    assert run["progress"]["agents"] == {"running": 1, "finished": 0, "failed": 0, "cancelled": 0}
    again = await runs.client.post(POST, json={"requests": [{"agent_id": ada["id"], "input": "again"}]})
    assert again.status_code == 409, again.text
    assert ada["id"] in again.json()["detail"]
    sync = await runs.client.post(f"/v1/agents/{ada['id']}/messages", json={"input": "now please"})
    assert sync.status_code == 409, sync.text
    reset = await runs.client.patch(f"/v1/agents/{ada['id']}/reset-messages", json={})
    assert reset.status_code == 409, reset.text


async def test_a_run_cancelled_while_queued_ends_without_a_step_and_frees_its_agents(runs: Runs, app: FastAPI) -> None:
    ada, bob = await runs.agent("ada"), await runs.agent("bob")
    run = await queue(runs.client, [ada, bob])
    assert run["progress"]["agents"] == {"running": 2, "finished": 0, "failed": 0, "cancelled": 0}
    cancelled = json_object(await runs.client.patch(f"{POST}/{run['id']}/cancel"))
    assert (cancelled["status"], cancelled["progress"]["provider_batches"]) == ("cancelled", [])
    assert await worker_of(app).start_queued_runs() == 0  # nothing left to start
    after = json_object(await runs.client.get(f"{POST}/{run['id']}"))
    assert (after["status"], after["progress"]["provider_batches"]) == ("cancelled", [])
    # Its agents count as cancelled, in the run and in the page of runs, though no step held them.
    assert after["progress"]["agents"] == {"running": 0, "finished": 0, "failed": 0, "cancelled": 2}
    (listed,) = (await runs.client.get(POST)).json()
    assert listed["progress"]["agents"] == after["progress"]["agents"]
    # Its agents are free: a run of them is taken, and stepped.
    second = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (ada, bob)])
    assert [b["status"] for b in second["progress"]["provider_batches"]] == ["running"]


async def test_an_agent_deleted_while_its_run_is_queued_is_left_out_of_it(runs: Runs, app: FastAPI) -> None:
    stays, goes = await runs.agent("stays"), await runs.agent("goes")
    run = await queue(runs.client, [stays, goes])
    assert (await runs.client.delete(f"/v1/agents/{goes['id']}")).status_code == 200
    assert await worker_of(app).start_queued_runs() == 1
    started = json_object(await runs.client.get(f"{POST}/{run['id']}"))
    (batch,) = started["progress"]["provider_batches"]
    assert batch["status"] == "running"
    agents = (await runs.client.get(f"{POST}/{run['id']}/agents")).json()["agents"]
    assert [a["agent_id"] for a in agents] == [stays["id"]]


async def test_a_run_whose_every_agent_was_deleted_while_queued_fails(runs: Runs, app: FastAPI) -> None:
    goes = await runs.agent("goes")
    run = await queue(runs.client, [goes])
    assert (await runs.client.delete(f"/v1/agents/{goes['id']}")).status_code == 200
    assert await worker_of(app).start_queued_runs() == 1
    ended = json_object(await runs.client.get(f"{POST}/{run['id']}"))
    assert (ended["status"], ended["progress"]["provider_batches"]) == ("failed", [])
    # The deleted agent was left out: the run has no agent to count, and says why it failed.
    assert ended["progress"]["agents"] == {"running": 0, "finished": 0, "failed": 0, "cancelled": 0}
    assert ended["error"] == "every agent of the run was deleted before its first step"


async def test_pollers_starting_the_queue_at_once_write_each_first_step_once(runs: Runs, app: FastAPI) -> None:
    agents = [await runs.agent(f"agent-{i}") for i in range(6)]
    posted = [await queue(runs.client, agents[i : i + 2]) for i in range(0, len(agents), 2)]
    worker = worker_of(app)
    # Three pollers of one process (as many as the pool allows): each run is started by one.
    started = await asyncio.gather(*(worker.start_queued_runs() for _ in range(3)))
    assert sum(started) == len(posted)
    for run in posted:
        view = json_object(await runs.client.get(f"{POST}/{run['id']}"))
        assert [b["step_number"] for b in view["progress"]["provider_batches"]] == [0], view
        assert view["progress"]["agents"]["running"] == 2


async def test_a_run_whose_first_step_cannot_be_written_fails_saying_so(runs: Runs, app: FastAPI, db_url: str) -> None:
    broken = await runs.agent("broken")
    run = await queue(runs.client, [broken])
    # Changed in the database since the run was queued: its model settings no longer read.
    async with opened(db_url) as engine, engine.begin() as conn:
        await conn.execute(update(agents).where(agents.c.id == broken["id"]).values(llm_config={"model": 5}))
    assert await worker_of(app).start_queued_runs() == 1
    ended = json_object(await runs.client.get(f"{POST}/{run['id']}"))
    assert (ended["status"], ended["progress"]["provider_batches"]) == ("failed", [])
    # The reason stays in the server's log; the caller is told where to look.
    assert ended["error"] == "the server could not write the run's first step (its log says why)"


@contextlib.asynccontextmanager
async def _watching(db_url: str, every: float) -> AsyncIterator[tuple[AsyncEngine, asyncio.Event]]:
    """The queue's watch on its own engine, and the event it sets, until the block ends."""
    wake = asyncio.Event()
    async with opened(db_url) as engine:
        watching = asyncio.create_task(watch_queue(engine, wake, every=every))
        try:
            yield engine, wake
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching


@sqlite_only
async def test_on_sqlite_a_run_queued_elsewhere_wakes_the_watch_which_holds_no_snapshot(
    runs: Runs, db_url: str
) -> None:
    """The watch asks SQLite whether another connection committed, and reads the tables then;
    between its looks it leaves no transaction open, so a checkpoint can empty the log."""
    ada = await runs.agent("ada")
    async with _watching(db_url, every=0.01) as (engine, wake):
        async with engine.connect() as conn:
            await conn.execute(text("PRAGMA busy_timeout=2000"))  # a held snapshot fails it in 2 s
            for _ in range(3):  # while the watch looks, again and again
                busy, _log, _done = (await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))).one()
                assert busy == 0
                await asyncio.sleep(0.02)
        assert not wake.is_set()  # nothing queued, nothing due
        await queue(runs.client, [ada])
        await asyncio.wait_for(wake.wait(), timeout=5)


@sqlite_only
async def test_on_linux_a_commit_elsewhere_wakes_the_sqlite_watch_at_once(runs: Runs, db_url: str) -> None:
    """Linux tells the watch of each write to the database's files: a run queued by another
    connection wakes it long before its timer (an hour here) would."""
    ada = await runs.agent("ada")
    async with _watching(db_url, every=3600) as (_engine, wake):
        await asyncio.sleep(0.5)  # its first look, at once, finds nothing
        assert not wake.is_set()
        await queue(runs.client, [ada])
        await asyncio.wait_for(wake.wait(), timeout=10)
