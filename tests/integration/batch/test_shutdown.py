"""Shutting the app down: ``GET /v1/ready`` turns to 503 draining, and the process gives back its leases.

The app's lifespan runs in a task of its own here (as uvicorn runs it), so a test can watch the
readiness route while the shutdown is under way. The tests read the database with an engine of
their own: the app's is disposed of when its lifespan ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from integration.batch.kit import wait_for
from nightshift.api.app import create_app
from nightshift.batch.worker import Worker
from nightshift.config import Settings
from nightshift.emulator import EmulatorAdmin
from nightshift.store.tables import provider_batches
from support.runs import Runs

FOREIGN_OWNER = "another-host:4242:0123abcd"


@asynccontextmanager
async def lifespan_task(app: FastAPI) -> AsyncIterator[tuple[asyncio.Event, asyncio.Task[None]]]:
    """Start the app's lifespan in a task; yields the event that starts its shutdown, and the task."""
    started, stop = asyncio.Event(), asyncio.Event()

    async def serve() -> None:
        async with app.router.lifespan_context(app):
            started.set()
            await stop.wait()

    task = asyncio.create_task(serve(), name="lifespan")
    try:
        async with asyncio.timeout(30):
            await started.wait()
        yield stop, task
    finally:
        stop.set()
        await task


@asynccontextmanager
async def client_of(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as http:
        yield http


async def readiness(client: httpx.AsyncClient) -> tuple[int, str]:
    answer = await client.get("/v1/ready")
    status: str = answer.json()["status"]
    return answer.status_code, status


async def held_run(runs: Runs, engine: AsyncEngine, owner: str) -> str:
    """A run whose one provider batch stays in progress, leased to ``owner`` for an hour; its batch id."""
    agent = await runs.agent(f"held-{uuid.uuid4().hex[:8]}")
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    (batch,) = run["progress"]["provider_batches"]
    # Between the poller's passes (it holds a batch only while it polls), the lease is taken.
    async with engine.begin() as conn:
        await conn.execute(
            update(provider_batches)
            .where(provider_batches.c.id == batch["id"])
            .values(lease_owner=owner, lease_expires_at=datetime.now(UTC) + timedelta(hours=1))
        )
    return str(batch["id"])


async def test_shutdown_turns_ready_to_draining_and_gives_back_the_process_leases(
    settings: Settings, engine: AsyncEngine, emulator: str, admin: EmulatorAdmin
) -> None:
    app = create_app(settings)
    async with client_of(app) as client:
        assert await readiness(client) == (503, "starting")
        await admin.configure(polls_to_end=1000)
        async with lifespan_task(app) as (stop, task):
            assert await readiness(client) == (200, "ready")
            assert (await client.get("/v1/ready/")).status_code == 200
            worker: Worker = app.state.nightshift.worker
            runs = Runs(client)
            ours = await held_run(runs, engine, worker.for_request().owner)  # as a request of this process
            theirs = await held_run(runs, engine, FOREIGN_OWNER)
            stop.set()
            await task
            async with engine.connect() as conn:
                rows = {
                    r.id: r
                    for r in await conn.execute(
                        select(provider_batches.c.id, provider_batches.c.lease_owner, provider_batches.c.next_poll_at)
                    )
                }
        assert await readiness(client) == (503, "draining")
    # This process's lease is given back, the batch due at once; another process's stays.
    assert rows[ours].lease_owner is None
    assert rows[ours].next_poll_at is not None
    assert rows[ours].next_poll_at.replace(tzinfo=UTC) <= datetime.now(UTC)
    assert rows[theirs].lease_owner == FOREIGN_OWNER


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_ready_answers_draining_while_the_shutdown_is_under_way(
    settings: Settings, engine: AsyncEngine, emulator: str, admin: EmulatorAdmin
) -> None:
    app = create_app(settings)
    await admin.configure(polls_to_end=1000)
    async with client_of(app) as client, lifespan_task(app) as (stop, task):
        worker: Worker = app.state.nightshift.worker
        ours = await held_run(Runs(client), engine, worker.for_request().owner)
        # Hold the batch's row: the shutdown waits on it when it gives the lease back.
        async with engine.connect() as blocker:
            await blocker.execute(select(provider_batches.c.id).where(provider_batches.c.id == ours).with_for_update())
            stop.set()
            await wait_for(lambda: _draining(client))
            await asyncio.sleep(0.2)
            assert not task.done(), "the shutdown ended without giving back the lease it holds"
            await blocker.rollback()
        await task
        assert await readiness(client) == (503, "draining")
        async with engine.connect() as conn:
            owner = await conn.scalar(select(provider_batches.c.lease_owner).where(provider_batches.c.id == ours))
        assert owner is None


async def _draining(client: httpx.AsyncClient) -> bool:
    return await readiness(client) == (503, "draining")
