"""Chaos: 1,500 agents through ten runs while the server is SIGKILLed fifteen times.

Eight kills land in the one window that used to bill a step twice: the provider has accepted a
step's batch (the emulator answers the create 0.3 s late) and the server has not recorded
it. The other seven come at random moments. Each time a new server takes over. At the end every
run must be complete, every agent asked once per step, and every batch the provider holds must
be one the database knows; a copy of one (if any) must be cancelled. The provider bills what it
processed: the agent-steps, plus at most what was in flight at a kill. The runs are created
while the kills go on, each POST retried with its Idempotency-Key until a server answers.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import select

from nightshift.domain.agents import LLMConfig
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator import EmulatorAdmin
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.store.db import opened, upgrade
from nightshift.store.orgs import ensure_default_org
from nightshift.store.tables import provider_batches
from support.processes import Server, Servers, server_environment

pytestmark = pytest.mark.slow

AGENTS = 1_500
RUNS = 10
KILLS = 15
IN_THE_WINDOW = 8
STEPS = 2  # core_memory_append with a heartbeat, then send_message
TIMEOUT = 420.0  # a deadline only: generous, for two cores that other tests keep busy
CREATES = ("/v1/messages/batches", "/v1/batches")
MODELS = {
    "anthropic": LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022"),
    "openai": LLMConfig(provider="openai", model="gpt-4o-mini"),
}


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    # Short leases: a killed server's batches are taken over 1.5 s after it died.
    group = Servers(server_environment(db_url, tmp_path / "home", NIGHTSHIFT_LEASE_SECONDS="1.5"), tmp_path)
    yield group
    group.kill_all()  # what the test checks is done: a graceful stop would only be waited for


async def _agents(db_url: str) -> list[str]:
    """Half on Anthropic (batches found by count), half on OpenAI (by tag), made in bulk."""
    async with opened(db_url) as engine:
        await upgrade(engine)
        async with engine.begin() as conn:
            await ensure_default_org(conn, datetime.now(UTC))
            specs = [
                AgentSpec(
                    name=f"chaos-{i}",
                    llm_config=MODELS["anthropic" if i % 2 else "openai"],
                    memory_blocks=[NewBlock(label="human", value="Nothing known yet.", limit=5_000)],
                )
                for i in range(AGENTS)
            ]
            return [agent.id for agent in await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))]


def _fresh_connections() -> httpx.AsyncClient:
    """A client that opens a new connection for each request (a kept-alive one may be closed by the
    other end while the test waits for a server to restart); one for the whole test, since building
    a client reads the CA bundle and the test asks every 20 ms."""
    return httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))


class _Creates:
    """The batch creates the emulator receives, asked for by time: each look reads only those after
    the last one seen (the log holds every create's body, 150 requests each: reading them all every
    20 ms cost the test more than the servers it kills)."""

    def __init__(self, http: httpx.AsyncClient, emulator: str) -> None:
        self.http, self.emulator = http, emulator
        self.last = 0.0  # when the newest create seen had arrived (the emulator's clock)

    async def new(self) -> int:
        """How many creates arrived since the last look."""
        arrived: list[float] = []
        for path in CREATES:
            query: dict[str, str | float] = {"path": path, "method": "POST", "since": self.last}
            response = await self.http.get(f"{self.emulator}/_emulator/requests", params=query)
            arrived += [entry["received_at"] for entry in response.json()["data"]]
        self.last = max(arrived, default=self.last)
        return len(arrived)


async def _all_done(http: httpx.AsyncClient, server: Server, run_ids: list[str]) -> bool:
    try:
        for run_id in run_ids:
            status = (await http.get(f"{server.base_url}/v1/messages/batches/{run_id}")).json()["status"]
            if status in ("created", "running"):
                return False
    except httpx.HTTPError:
        return False
    return True


async def _provider_side(emulator: str) -> dict[str, tuple[str, int, int]]:
    """Every batch the emulator holds: its id -> (status, requests, requests processed and billed)."""
    found: dict[str, tuple[str, int, int]] = {}
    async with anthropic.AsyncAnthropic(base_url=emulator, api_key="k") as claude:
        async for batch in claude.messages.batches.list(limit=100):
            counts = batch.request_counts
            total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
            found[batch.id] = (batch.processing_status, total, counts.succeeded + counts.errored)
    async with openai.AsyncOpenAI(base_url=f"{emulator}/v1", api_key="k") as gpt:
        async for job in gpt.batches.list(limit=100):
            job_counts = job.request_counts
            assert job_counts is not None
            found[job.id] = (job.status, job_counts.total, job_counts.completed + job_counts.failed)
    return found


class Chaos:
    """The server of the moment, killed and replaced on demand."""

    def __init__(self, servers: Servers) -> None:
        self.servers = servers
        self.server: Server | None = None
        self.kills = 0
        self.up = asyncio.Event()

    async def start(self) -> None:
        self.server = await self.servers.start(f"server-{self.kills}")
        self.up.set()

    async def kill_and_restart(self) -> None:
        assert self.server is not None
        self.up.clear()
        self.server.kill()
        self.kills += 1
        await self.start()

    async def post(self, body: dict[str, object], key: str) -> dict[str, object]:
        """Create a run, retrying through kills with the same Idempotency-Key."""
        while True:
            await self.up.wait()
            assert self.server is not None
            try:
                async with httpx.AsyncClient(base_url=self.server.base_url, timeout=120) as http:
                    response = await http.post("/v1/messages/batches", json=body, headers={"Idempotency-Key": key})
                response.raise_for_status()
                created: dict[str, object] = response.json()
                return created
            except httpx.TransportError:
                await asyncio.sleep(0.1)  # killed under us: the next server answers the retry


# About three minutes on two busy cores: its own deadline (TIMEOUT) is 420 s, with set-up on top.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_fifteen_kills_bill_nothing_twice(
    servers: Servers, admin: EmulatorAdmin, emulator: str, db_url: str
) -> None:
    random.seed(8283)
    agent_ids = await _agents(db_url)
    # A create answers 0.3 s after the batch exists: the window to kill into.
    await admin.configure(polls_to_end=1, create_answer_delay=0.3)
    chaos = Chaos(servers)
    await chaos.start()
    share = AGENTS // RUNS
    parts = [agent_ids[i : i + share] for i in range(0, AGENTS, share)]
    creating = asyncio.gather(
        *(
            chaos.post(
                {"requests": [{"agent_id": a, "input": f"Please remember my code {a[-6:]}."} for a in part]}, f"run-{n}"
            )
            for n, part in enumerate(parts)
        )
    )

    in_window = 0
    async with _fresh_connections() as probe:
        creates = _Creates(probe, emulator)
        await creates.new()  # the baseline, as after each kill
        deadline = time.monotonic() + TIMEOUT
        while chaos.kills < KILLS:
            assert time.monotonic() < deadline, "the kills did not happen in time"
            random_kill_at = time.monotonic() + random.uniform(0.3, 2.0)
            while True:
                if await creates.new() and in_window < IN_THE_WINDOW:
                    in_window += 1
                    break  # the provider has the batch; the server has not heard
                if chaos.kills - in_window < KILLS - IN_THE_WINDOW and time.monotonic() > random_kill_at:
                    break
                await asyncio.sleep(0.02)
            await chaos.kill_and_restart()
            await creates.new()  # those sent while the next server started: not in a window
        run_ids = [str(run["id"]) for run in await creating]
        assert chaos.server is not None
        while not await _all_done(probe, chaos.server, run_ids):
            assert time.monotonic() < deadline, "the runs did not complete"
            await asyncio.sleep(0.2)
    await admin.configure(create_answer_delay=0.0)

    async with httpx.AsyncClient(base_url=chaos.server.base_url, timeout=60) as http:
        finals = [(await http.get(f"/v1/messages/batches/{run_id}")).json() for run_id in run_ids]
        listed = (await http.get("/v1/messages/batches", params={"limit": 100})).json()
    assert len(listed) == RUNS  # retried creations made no second run
    for final in finals:
        assert final["status"] == "completed", final["progress"]
        assert final["progress"]["agents"]["failed"] == 0, final["progress"]["failures"][:3]
    assert sum(final["progress"]["agents"]["finished"] for final in finals) == AGENTS

    # Every batch the provider holds is one the database knows, or a cancelled copy of one.
    async with opened(db_url) as engine:
        async with engine.connect() as conn:
            rows = list(await conn.execute(select(provider_batches.c.provider_batch_id, provider_batches.c.duplicates)))
    ours = {row.provider_batch_id for row in rows}
    copies = {copy for row in rows for copy in row.duplicates}
    # Every agent was asked exactly once per step, in the batches that count.
    calls = await admin.model_calls()
    asked = Counter(c["custom_id"] for c in calls if c["batch_id"] is not None and c["batch_id"] not in copies)
    assert set(asked.values()) == {STEPS} and len(asked) == AGENTS
    provider_side = await _provider_side(emulator)
    assert set(provider_side) == ours | copies, "a batch the provider holds is unknown to the database"
    running = [i for i in copies if provider_side[i][0] not in ("ended", "canceled", "cancelled", "cancelling")]
    assert running == [], "a duplicate is still running"
    billed = sum(processed for _, _, processed in provider_side.values())
    in_flight = sum(total for batch_id, (_, total, _) in provider_side.items() if batch_id in copies)
    print(
        f"chaos: {chaos.kills} kills ({in_window} between accept and record), {len(provider_side)} provider "
        f"batches, {len(copies)} duplicates (cancelled), {billed} requests billed for {AGENTS * STEPS} agent-steps"
    )
    assert in_window == IN_THE_WINDOW
    assert AGENTS * STEPS <= billed <= AGENTS * STEPS + in_flight
