"""Two ``nightshift serve`` processes on one PostgreSQL database share batch runs.

Both poll the same provider batches (claimed with leases and ``FOR UPDATE SKIP LOCKED``); a run
is created through one and its agents through the other. Each step must be submitted once and
each result applied once, whichever process does the work; and a stage that lasts longer than a
lease stays with the live process that holds it (the lease is renewed), so its tools run once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from nightshift.store.db import opened
from nightshift.store.tables import provider_batches
from support.api import create_tool
from support.processes import (
    SLOW_TOOL_ENV,
    Server,
    Servers,
    ToolCallLog,
    assert_messages_once,
    batch_creates,
    create_agent,
    fact_of,
    server_environment,
    slow_tool_source,
    stored_before,
)
from support.runs import ANTHROPIC_MODEL, LOOKUP_TOOL, OPENAI_MODEL, Runs

pytestmark = [pytest.mark.parametrize("db_url", ["postgresql"], indirect=True), pytest.mark.slow]

AGENTS = 30
PROVIDERS = 2
INPUT = "Hello! How are you today?"
# The lease of the servers of the slow stage (shorter than the default, which the stage would
# have to outlast), and their tool, which outlasts it by a margin: renewed every third of a lease,
# the lease is kept by a live holder on a busy machine.
SLOW_STAGE_LEASE_SECONDS = 3.0
SLOW_TOOL_SECONDS = SLOW_STAGE_LEASE_SECONDS + 1.5


def steps_of(index: int) -> int:
    """Every third agent takes three steps, the others two."""
    return 3 if index % 3 == 0 else 2


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    group = Servers(server_environment(db_url, tmp_path / "home", **SLOW_TOOL_ENV), tmp_path)
    yield group
    group.kill_all()  # what the test checks is done: a graceful stop would only be waited for


async def watch_leases(db_url: str, seen: Counter[str]) -> None:
    """Count, every few milliseconds, which process holds a lease on a provider batch.

    Leases are not kept after they are released, so this only samples them while they are held.
    """
    async with opened(db_url) as engine:
        while True:
            async with engine.connect() as conn:
                owners = await conn.scalars(
                    select(provider_batches.c.lease_owner).where(provider_batches.c.lease_owner.is_not(None))
                )
                seen.update(str(o) for o in owners)
            await asyncio.sleep(0.005)


async def start_two(servers: Servers, **extra_env: str) -> tuple[Server, Server]:
    """Servers A and B, started at the same moment on the new database (both migrate and set up)."""
    first, second = await asyncio.gather(servers.start("A", **extra_env), servers.start("B", **extra_env))
    return first, second


def pid_of(owner: str) -> int:
    """The process id in a lease owner (``host:pid:random``)."""
    return int(owner.split(":")[-2])


async def test_two_servers_share_a_run(servers: Servers, admin: EmulatorAdmin, db_url: str) -> None:
    # Every provider batch stays in progress for three polls, by either process.
    await admin.configure(polls_to_end=3)
    first, second = await start_two(servers)
    seen: Counter[str] = Counter()
    watcher = asyncio.create_task(watch_leases(db_url, seen))
    try:
        run, agents, before = await run_through_both(first, second, admin)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher

    steps = {a["id"]: steps_of(i) for i, a in enumerate(agents)}
    # One provider batch per provider and step, each created once at the provider.
    creates = await batch_creates(admin)
    assert len(creates) == max(steps.values()) * PROVIDERS
    provider_ids = {b["provider_batch_id"] for b in run["progress"]["provider_batches"]}
    assert len(provider_ids) == len(run["progress"]["provider_batches"]) == len(creates)
    assert {b["status"] for b in run["progress"]["provider_batches"]} == {"applied"}
    # Each agent was asked once per step, in one of those batches, never twice in one batch.
    calls = [c for c in await admin.model_calls() if c["batch_id"] is not None]
    per_batch: dict[str, Counter[str]] = defaultdict(Counter)
    for call in calls:
        per_batch[call["batch_id"]][call["custom_id"]] += 1
    assert set(per_batch) == provider_ids
    for batch_id, custom_ids in per_batch.items():
        assert max(custom_ids.values()) == 1, f"an agent twice in {batch_id}: {custom_ids.most_common(3)}"
    assert Counter(c["custom_id"] for c in calls) == steps

    # Each result was applied once: every agent holds its messages once (stored, in context, in the
    # run) and its memory edit once.
    expected = {}
    for agent_id, count in steps.items():
        labels = [f"user:{INPUT}", "call:core_memory_append", "return:core_memory_append:success", "heartbeat"]
        if count == 3:
            labels += ["call:lookup_order", "return:lookup_order:success", "heartbeat"]
        expected[agent_id] = [*labels, "call:send_message", "return:send_message:success"]
    async with httpx.AsyncClient(base_url=first.base_url, timeout=30) as client:
        stored = await assert_messages_once(client, run["id"], expected, before)
    for agent in agents:
        human = next(b for b in stored[agent["id"]]["blocks"] if b["label"] == "human")
        assert human["value"].count(fact_of(agent)) == 1, human["value"]

    # Which process held the leases we saw (sampled; the run was created through B, which
    # submitted its first step).
    # (A server's poller is a child process of its own: its pid is one of the server's.)
    pids = Counter(pid_of(owner) for owner in seen.elements())
    of_a, of_b = first.pids(), second.pids()
    print(f"lease samples: A={sum(pids[p] for p in of_a)} B={sum(pids[p] for p in of_b)}")
    assert set(pids) <= of_a | of_b, pids

    # Each server's /metrics counts its poller process's work too: together they applied every batch.
    assert await applied_stages((first, second), at_least=len(provider_ids)) >= len(provider_ids)


async def applied_stages(servers: tuple[Server, ...], *, at_least: int) -> float:
    """The ``apply`` stages the servers' /metrics count, waiting (5 s at most) for ``at_least``: a
    poller process writes its figures after each pass, and the pass that ended the run may not be over."""
    counted = 0.0
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(50):
            counted = 0.0
            for server in servers:
                text = (await client.get(f"{server.base_url}/metrics")).text
                counted += sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith("nightshift_stage_duration_seconds_count{") and 'stage="apply"' in line
                )
            if counted >= at_least:
                return counted
            await asyncio.sleep(0.1)
    return counted


async def run_through_both(
    first: Server, second: Server, admin: EmulatorAdmin
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, list[str]]]:
    """Agents made through A, the run started through B; returns the run once it completed."""
    async with (
        httpx.AsyncClient(base_url=first.base_url, timeout=30) as through_a,
        httpx.AsyncClient(base_url=second.base_url, timeout=30) as through_b,
    ):
        runs_a, runs_b = Runs(through_a), Runs(through_b)
        tool = await create_tool(through_a, LOOKUP_TOOL)
        models = (ANTHROPIC_MODEL, OPENAI_MODEL)
        agents = [
            await create_agent(through_a, f"agent-{i}", models[i % PROVIDERS], tool_ids=[tool["id"]])
            for i in range(AGENTS)
        ]
        for index, agent in enumerate(agents):
            remember = ScriptedToolCall(
                name="core_memory_append",
                arguments={"label": "human", "content": fact_of(agent)},
                request_heartbeat=True,
            )
            replies = [ScriptedReply(tool_call=remember)]
            if steps_of(index) == 3:
                lookup = ScriptedToolCall(
                    name="lookup_order", arguments={"order_id": agent["name"]}, request_heartbeat=True
                )
                replies.append(ScriptedReply(tool_call=lookup))
            # The last step is the emulator's own: send_message after a tool result.
            await admin.script(agent["id"], *replies)
        before = await stored_before(through_a, [a["id"] for a in agents])
        started = await runs_b.start([{"agent_id": a["id"], "input": INPUT} for a in agents])
        # Generous: each process's first submit imports its provider SDKs, seconds on a loaded machine.
        done = await runs_a.wait(started["id"], timeout=120)
        assert done["status"] == "completed", done
        assert done["progress"]["agents"] == {"running": 0, "finished": AGENTS, "failed": 0, "cancelled": 0}
        return done, agents, before


async def test_a_stage_longer_than_a_lease_is_not_taken_over(
    servers: Servers, admin: EmulatorAdmin, tool_log: ToolCallLog
) -> None:
    source = slow_tool_source(tool_log, SLOW_TOOL_SECONDS)
    await admin.configure(polls_to_end=1)
    first, second = await start_two(servers, NIGHTSHIFT_LEASE_SECONDS=str(SLOW_STAGE_LEASE_SECONDS))
    async with (
        httpx.AsyncClient(base_url=first.base_url, timeout=30) as through_a,
        httpx.AsyncClient(base_url=second.base_url, timeout=30) as through_b,
    ):
        tool = await create_tool(through_a, source)
        agents = [await create_agent(through_a, f"slow-{i}", ANTHROPIC_MODEL, tool_ids=[tool["id"]]) for i in range(2)]
        for agent in agents:
            call = ScriptedToolCall(name="slow_lookup", arguments={"order_id": agent["name"]}, request_heartbeat=False)
            await admin.script(agent["id"], ScriptedReply(tool_call=call))
        before = await stored_before(through_a, [a["id"] for a in agents])
        started = await Runs(through_b).start([{"agent_id": a["id"], "input": INPUT} for a in agents])
        done = await Runs(through_a).wait(started["id"], timeout=SLOW_TOOL_SECONDS + 10)
        assert done["status"] == "completed", done
        # Whichever server resumed the step kept it: the other did not take over and run the tools again.
        assert tool_log.calls() == {a["name"]: 1 for a in agents}
        expected = {a["id"]: [f"user:{INPUT}", "call:slow_lookup", "return:slow_lookup:success"] for a in agents}
        await assert_messages_once(through_b, started["id"], expected, before)
