"""SIGTERM to one of two ``nightshift serve`` processes on one PostgreSQL database: it stops the
stage it runs after its grace period, gives back its leases and exits, and the other process takes
its provider batches over at once, long before the leases would have expired.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from nightshift.store.db import opened
from nightshift.store.tables import batch_items, provider_batches
from support.api import create_tool
from support.processes import (
    SLOW_TOOL_ENV,
    Server,
    Servers,
    ToolCallLog,
    assert_messages_once,
    create_agent,
    server_environment,
    slow_tool_source,
    stored_before,
)
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL, Runs

pytestmark = [pytest.mark.parametrize("db_url", ["postgresql"], indirect=True), pytest.mark.slow]

AGENTS = 4
INPUT = "Where is my order?"
# A lease outlives the whole test: the batches are handed over only if the process gives them back.
LEASE_SECONDS = 120
GRACE_SECONDS = 1
# The stage the stopped process runs outlasts its grace period: it is cut, and redone by the other.
SLOW_TOOL_SECONDS = 6.0
# How long after SIGTERM the process may take to exit: its grace, then closing the sandbox and engine.
EXIT_SECONDS = GRACE_SECONDS + 10


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    env = server_environment(
        db_url,
        tmp_path / "home",
        NIGHTSHIFT_LEASE_SECONDS=str(LEASE_SECONDS),
        NIGHTSHIFT_SHUTDOWN_GRACE_SECONDS=str(GRACE_SECONDS),
        **SLOW_TOOL_ENV,
    )
    group = Servers(env, tmp_path)
    yield group
    group.kill_all()  # what the test checks is done: a graceful stop would only be waited for


def pid_of(owner: str) -> int:
    """The process id in a lease owner (``host:pid:random``)."""
    return int(owner.split(":")[-2])


async def lease_holders(db_url: str) -> set[int]:
    """The processes that hold a lease on a provider batch right now."""
    async with opened(db_url) as engine, engine.connect() as conn:
        owners = await conn.scalars(
            select(provider_batches.c.lease_owner).where(provider_batches.c.lease_owner.is_not(None))
        )
        return {pid_of(str(o)) for o in owners}


async def holders_running_tools(db_url: str, names: dict[str, str], called: set[str]) -> set[int]:
    """The processes that hold a lease on a provider batch one of whose agents' tools has started."""
    async with opened(db_url) as engine, engine.connect() as conn:
        rows = await conn.execute(
            select(provider_batches.c.lease_owner, batch_items.c.agent_id)
            .join(batch_items, batch_items.c.provider_batch_id == provider_batches.c.id)
            .where(provider_batches.c.lease_owner.is_not(None))
        )
        return {pid_of(str(owner)) for owner, agent_id in rows if names.get(agent_id) in called}


async def holder_of_a_stage(
    db_url: str, servers: tuple[Server, Server], tool_log: ToolCallLog, agents: list[dict[str, Any]]
) -> Server:
    """The server that holds a lease while the slow tools of its batch run (it resumes a step): not
    one that holds a lease on a batch whose tools have not started (it may be polling it)."""
    names = {agent["id"]: agent["name"] for agent in agents}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if called := set(tool_log.calls()):
            # The lease holder is the server's poller: its own child process (the default), or itself.
            holding = await holders_running_tools(db_url, names, called)
            holders = [s for s in servers if s.pids() & holding]
            if holders:
                return holders[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no server held a stage; tool calls {tool_log.calls()}")


async def test_sigterm_hands_the_batches_over_at_once(
    servers: Servers, admin: EmulatorAdmin, tool_log: ToolCallLog, db_url: str
) -> None:
    # Every provider batch stays in progress for three polls.
    await admin.configure(polls_to_end=3)
    first, second = await asyncio.gather(servers.start("A"), servers.start("B"))
    async with (
        httpx.AsyncClient(base_url=first.base_url, timeout=30) as through_a,
        httpx.AsyncClient(base_url=second.base_url, timeout=30) as through_b,
    ):
        # The calls redone by the survivor need not be slow: they return at once.
        tool = await create_tool(through_a, slow_tool_source(tool_log, SLOW_TOOL_SECONDS, again=0.0))
        models = (ANTHROPIC_MODEL, OPENAI_MODEL)
        agents = [
            await create_agent(through_a, f"order-{i}", models[i % 2], tool_ids=[tool["id"]]) for i in range(AGENTS)
        ]
        for agent in agents:
            call = ScriptedToolCall(name="slow_lookup", arguments={"order_id": agent["name"]}, request_heartbeat=True)
            await admin.script(agent["id"], ScriptedReply(tool_call=call))
        before = await stored_before(through_a, [a["id"] for a in agents])
        started = await Runs(through_a).start([{"agent_id": a["id"], "input": INPUT} for a in agents])

        stopped = await holder_of_a_stage(db_url, (first, second), tool_log, agents)
        survivor = second if stopped is first else first
        async with httpx.AsyncClient(base_url=stopped.base_url, timeout=5) as direct:
            assert (await direct.get("/v1/ready")).json() == {"status": "ready"}
        stopped_pids = stopped.pids()
        stopped.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            code = stopped.process.wait(timeout=EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{stopped.name} still runs {EXIT_SECONDS} s after SIGTERM") from None
        # uvicorn ends by raising the signal again, once the lifespan has shut down.
        assert code == -signal.SIGTERM, f"{stopped.name} exited with {code}\n{stopped.log_tail()}"
        log = stopped.log_path.read_text(errors="replace")
        assert "Application shutdown complete" in log, stopped.log_tail()
        assert "outlasted" in log, stopped.log_tail()  # its stage was cut at the end of its grace
        # It held a lease when it was signalled (its poller process did); it holds none now, 118 s
        # before that lease expires.
        assert not stopped_pids & await lease_holders(db_url)

        # The survivor takes the stopped stage over at once and finishes the run, well before the
        # stopped process's leases would have expired.
        survivor_client = through_b if survivor is second else through_a
        done = await Runs(survivor_client).wait(started["id"], timeout=LEASE_SECONDS / 2)
        assert time.monotonic() - signalled < LEASE_SECONDS / 2
        assert done["status"] == "completed", done
        assert done["progress"]["agents"] == {"running": 0, "finished": AGENTS, "failed": 0, "cancelled": 0}

        # The cut stage was redone (its tools ran again: at least once, as documented); what the
        # run stored is there exactly once.
        calls = tool_log.calls()
        assert set(calls) == {a["name"] for a in agents}
        assert max(calls.values()) == 2, calls
        expected = {
            a["id"]: [
                f"user:{INPUT}",
                "call:slow_lookup",
                "return:slow_lookup:success",
                "heartbeat",
                "call:send_message",
                "return:send_message:success",
            ]
            for a in agents
        }
        await assert_messages_once(survivor_client, started["id"], expected, before)
