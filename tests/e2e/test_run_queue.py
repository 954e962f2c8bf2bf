"""New runs go through a queue in the database (``batch/run_queue.py``): ``POST /v1/messages/batches``
writes the run and its requests and answers at once; a poller, in whatever process, writes its
first step and submits it.

Real ``nightshift serve`` processes: one without a poller (``NIGHTSHIFT_POLLER=false``) stands for
an API whose poller is down; a poller's death between claiming a run and committing its first
step is a transaction that never commits.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from nightshift.batch.steps import write_first_step
from nightshift.domain.batches import BatchRunRequest
from nightshift.emulator import EmulatorAdmin
from nightshift.store import batch_runs as batch_run_store
from nightshift.store.db import opened
from nightshift.store.tables import batch_items, provider_batches
from support.api import json_object
from support.processes import Servers, batch_creates, server_environment
from support.runs import Runs

INPUT = "Remember that my name is Ada."
POST = "/v1/messages/batches"
# A poller that waits this long between passes: a run it starts sooner was announced to it.
SLOW_POLL = "300"
# How long a test waits for a poller (a process that starts, on a machine that may be busy).
WAIT = 120

# Each test starts one or two servers (and their poller processes) on a machine that may be busy.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    group = Servers(server_environment(db_url, tmp_path / "home"), tmp_path)
    yield group
    group.kill_all()  # what the test checks is done: a graceful stop would only be waited for


async def queue(client: httpx.AsyncClient, agents: list[dict[str, Any]]) -> dict[str, Any]:
    """POST a run of ``agents``; its answer (201 or 200, as the API gives)."""
    response = await client.post(POST, json={"requests": [{"agent_id": a["id"], "input": INPUT} for a in agents]})
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


async def first_steps(db_url: str, run_id: str) -> tuple[int, Counter[str]]:
    """How many provider batches the run's first step has, and its items by agent."""
    async with opened(db_url) as engine, engine.connect() as conn:
        step_zero = provider_batches.c.batch_run_id == run_id, provider_batches.c.step_number == 0
        batches = len((await conn.execute(select(provider_batches.c.id).where(*step_zero))).all())
        items = select(batch_items.c.agent_id).join(provider_batches).where(*step_zero)
        return batches, Counter(str(a) for a in await conn.scalars(items))


async def test_a_run_posted_while_no_poller_runs_is_stepped_when_one_starts(servers: Servers, db_url: str) -> None:
    api = await servers.start("api", NIGHTSHIFT_POLLER="false")
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as client:
        runs = Runs(client)
        ada, bob = await runs.agent("ada"), await runs.agent("bob")
        run = await queue(client, [ada, bob])
        assert (run["status"], run["progress"]["provider_batches"]) == ("created", [])
        # The run holds its agents from the start: a second run of one of them is refused.
        busy = await client.post(POST, json={"requests": [{"agent_id": ada["id"], "input": INPUT}]})
        assert busy.status_code == 409, busy.text
        await asyncio.sleep(1)
        still = json_object(await client.get(f"{POST}/{run['id']}"))
        assert (still["status"], still["progress"]["provider_batches"]) == ("created", [])

        await servers.start("poller")
        done = await runs.wait(run["id"], timeout=WAIT)
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 2
    assert await first_steps(db_url, run["id"]) == (1, Counter({ada["id"]: 1, bob["id"]: 1}))


async def batches_written(db_url: str) -> int:
    """How many provider batches the database holds, of every run and step."""
    async with opened(db_url) as engine, engine.connect() as conn:
        return len((await conn.execute(select(provider_batches.c.id))).all())


class _Killed(Exception):
    """The poller's process dying, as its transaction sees it: it never commits."""


async def test_a_poller_that_dies_before_committing_the_first_step_loses_nothing(
    servers: Servers, db_url: str, admin: EmulatorAdmin
) -> None:
    api = await servers.start("api", NIGHTSHIFT_POLLER="false")
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as client:
        runs = Runs(client)
        agents = [await runs.agent(name) for name in ("ada", "bob", "cy")]
        run = await queue(client, agents)
        async with opened(db_url) as engine:
            with pytest.raises(_Killed):
                async with engine.begin() as conn:
                    claimed = await batch_run_store.claim_queued_run(conn)
                    assert claimed is not None and claimed.id == run["id"]
                    requests = [
                        BatchRunRequest.from_json(r)
                        for r in await batch_run_store.take_queued_requests(conn, claimed.id)
                    ]
                    written = await write_first_step(conn, claimed, requests, datetime.now(UTC), endpoints={})
                    assert len(written) == 1
                    raise _Killed
        queued = json_object(await client.get(f"{POST}/{run['id']}"))
        assert (queued["status"], queued["progress"]["provider_batches"]) == ("created", [])

        await servers.start("poller")
        done = await runs.wait(run["id"], timeout=WAIT)
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 3
    assert await first_steps(db_url, run["id"]) == (1, Counter({a["id"]: 1 for a in agents}))
    assert len(await batch_creates(admin)) == await batches_written(db_url)  # each submitted once


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_two_pollers_on_one_database_write_each_first_step_once(
    servers: Servers, db_url: str, admin: EmulatorAdmin
) -> None:
    first, second = await servers.start("one"), await servers.start("two")
    async with (
        httpx.AsyncClient(base_url=first.base_url, timeout=30) as one,
        httpx.AsyncClient(base_url=second.base_url, timeout=30) as two,
    ):
        agents = [await Runs(one).agent(f"agent-{i}") for i in range(8)]
        # Both pollers are told of every run (NOTIFY) and race for it.
        posted = await asyncio.gather(
            *(queue(one if i % 2 else two, agents[i * 2 : i * 2 + 2]) for i in range(len(agents) // 2))
        )
        finished = [await Runs(one).wait(run["id"], timeout=WAIT) for run in posted]
    assert [run["status"] for run in finished] == ["completed"] * len(posted)
    for run, index in zip(posted, range(0, len(agents), 2), strict=True):
        pair = agents[index : index + 2]
        assert await first_steps(db_url, run["id"]) == (1, Counter({a["id"]: 1 for a in pair}))
    assert len(await batch_creates(admin)) == await batches_written(db_url)  # each submitted once


async def test_a_new_run_wakes_a_poller_in_another_process_at_once(servers: Servers) -> None:
    """On PostgreSQL the API's NOTIFY wakes it; on SQLite the kernel's report of the API's commit
    (Linux), after which it looks."""
    await servers.start("poller", NIGHTSHIFT_POLL_INTERVAL_SECONDS=SLOW_POLL)
    api = await servers.start("api", NIGHTSHIFT_POLLER="false")
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as client:
        runs = Runs(client)
        ada = await runs.agent("ada")
        await asyncio.sleep(1)  # the poller's first pass (at its start) is over: it waits its interval
        started = time.monotonic()
        run = await queue(client, [ada])
        submitted = await runs.started(run["id"], timeout=WAIT)
        assert time.monotonic() - started < WAIT < float(SLOW_POLL)
    (batch,) = submitted["progress"]["provider_batches"]
    assert batch["status"] == "running" and batch["provider_batch_id"] is not None


@pytest.fixture
def silent_provider() -> Iterator[str]:
    """A base URL whose connections are taken and never answered: a provider that hangs."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"


async def test_the_post_answers_without_waiting_for_the_provider(servers: Servers, silent_provider: str) -> None:
    server = await servers.start("api", ANTHROPIC_BASE_URL=silent_provider)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        runs = Runs(client)
        ada, bob = await runs.agent("ada"), await runs.agent("bob")
        started = time.monotonic()
        run = await queue(client, [ada, bob])
        assert time.monotonic() - started < 10
        assert run["status"] == "created"
        # The poller writes the first step, and its submission hangs: the run waits, submitted by none.
        deadline = time.monotonic() + WAIT
        while not (batches := json_object(await client.get(f"{POST}/{run['id']}"))["progress"]["provider_batches"]):
            assert time.monotonic() < deadline, "the poller did not write the first step"
            await asyncio.sleep(0.05)
    assert [(b["status"], b["provider_batch_id"]) for b in batches] == [("created", None)]
