"""A ``nightshift serve`` process killed with SIGKILL mid-run, then restarted: nothing lost, nothing doubled.

Three places to die, on SQLite and on PostgreSQL:

* after submit: the provider batch is at the provider, not yet ended;
* while polling: the poller is inside a retrieve call (holding the batch's lease);
* during resume: the agents' tools are running, before the transaction that writes their results.

Every agent takes two steps (a tool call with ``request_heartbeat``, then ``send_message``), half
of them on Anthropic and half on OpenAI (after submit: taking turns at Anthropic, OpenAI and
Gemini). After the restart the run must complete and every agent must hold each of its messages
exactly once: in its stored messages, in its context window, in the run's messages, and in its
memory (a memory edit applied twice would show twice).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import HttpFault, ScriptedReply, ScriptedToolCall
from support.api import create_tool, json_object
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
from support.runs import ANTHROPIC_MODEL, GEMINI_MODEL, OPENAI_MODEL, Runs

pytestmark = pytest.mark.slow  # each test kills and restarts servers

AGENTS = 4
RUN_TIMEOUT = 60.0  # a deadline only: generous, for a busy machine
# The first step's tool call of every agent; the second step is the emulator's own send_message.
MEMORY_CALL = "core_memory_append"
SLOW_CALL = "slow_lookup"
TOOL_SECONDS = 1.5
# Leases shorter than the default: the killed server's batches are free for the next one soon
# after it is up. (Renewed every third of a lease, a live server keeps its own on a busy machine.)
LEASE_SECONDS = 3.0


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    """Servers on one fresh database, pointed at the (reset) emulator; stopped at the end."""
    env = server_environment(
        db_url,
        tmp_path / "home",
        NIGHTSHIFT_TOOL_WORKERS=str(AGENTS),
        NIGHTSHIFT_LEASE_SECONDS=str(LEASE_SECONDS),
        **SLOW_TOOL_ENV,
    )
    group = Servers(env, tmp_path)
    yield group
    group.kill_all()  # what the test checks is done: a graceful stop would only be waited for


def client_of(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base_url, timeout=30)


async def create_agents(
    runs: Runs, *, models: tuple[str, ...] = (ANTHROPIC_MODEL, OPENAI_MODEL), tool_ids: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The agents, taking turns at the models (by default half on Anthropic, half on OpenAI)."""
    return [
        await create_agent(runs.client, f"agent-{i}", models[i % len(models)], tool_ids=list(tool_ids))
        for i in range(AGENTS)
    ]


async def script_memory_step(admin: EmulatorAdmin, agents: list[dict[str, Any]]) -> None:
    """Step 1 of each agent: append a fact to its human block and ask for another turn."""
    for agent in agents:
        call = ScriptedToolCall(
            name=MEMORY_CALL, arguments={"label": "human", "content": fact_of(agent)}, request_heartbeat=True
        )
        await admin.script(agent["id"], ScriptedReply(tool_call=call))


async def script_slow_step(admin: EmulatorAdmin, agents: list[dict[str, Any]]) -> None:
    """Step 1 of each agent: call the slow custom tool with its own name and ask for another turn."""
    for agent in agents:
        call = ScriptedToolCall(name=SLOW_CALL, arguments={"order_id": agent["name"]}, request_heartbeat=True)
        await admin.script(agent["id"], ScriptedReply(tool_call=call))


async def start_run(runs: Runs, agents: list[dict[str, Any]]) -> dict[str, Any]:
    """The run once its first step is submitted, read again: on PostgreSQL the read that saw the
    submission may have read the run just before the submission's commit and its batches just after."""
    run = await runs.start([{"agent_id": a["id"], "input": "Hello! How are you today?"} for a in agents])
    return json_object(await runs.client.get(f"/v1/messages/batches/{run['id']}"))


async def wait_for(condition: Callable[[], Awaitable[bool]], what: str, *, timeout: float = RUN_TIMEOUT) -> None:
    """Wait until the async ``condition()`` is true."""
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def assert_exactly_once(
    client: httpx.AsyncClient,
    admin: EmulatorAdmin,
    run_id: str,
    agents: list[dict[str, Any]],
    tool: str,
    before: dict[str, list[str]],
) -> None:
    """Each agent was asked once per step, and holds each message of its two steps once: stored,
    in context, in the run's messages and in memory."""
    asked = Counter(c["custom_id"] for c in await admin.model_calls() if c["batch_id"] is not None)
    assert asked == {a["id"]: 2 for a in agents}, "an agent was submitted twice in a step"
    steps = [
        "user:Hello! How are you today?",
        f"call:{tool}",
        f"return:{tool}:success",
        "heartbeat",
        "call:send_message",
        "return:send_message:success",
    ]
    state = await assert_messages_once(client, run_id, {a["id"]: steps for a in agents}, before)
    if tool == MEMORY_CALL:
        for agent in agents:
            human = next(b for b in state[agent["id"]]["blocks"] if b["label"] == "human")
            assert human["value"].count(fact_of(agent)) == 1, human["value"]


async def assert_completed(client: httpx.AsyncClient, run_id: str, *, providers: int = 2) -> dict[str, Any]:
    """The run completed for every agent, with one provider batch per provider and step, all applied."""
    done = await Runs(client).wait(run_id, timeout=RUN_TIMEOUT)
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": AGENTS, "failed": 0, "cancelled": 0}, done
    steps = Counter(b["step_number"] for b in done["progress"]["provider_batches"])
    assert steps == {0: providers, 1: providers}, done["progress"]["provider_batches"]
    assert all(b["status"] == "applied" for b in done["progress"]["provider_batches"]), done
    return done


async def test_killed_after_submit(servers: Servers, admin: EmulatorAdmin) -> None:
    # The first step's batches stay in progress for a while: enough polls that the first server
    # cannot end them before it dies. (Timing knobs are copied into a batch when it is created,
    # so this must be set before the run starts; lowering it later would not move those batches.)
    await admin.configure(polls_to_end=10, seconds_to_end=1.0)
    first = await servers.start("first")
    async with client_of(first) as client:
        runs = Runs(client)
        agents = await create_agents(runs, models=(ANTHROPIC_MODEL, OPENAI_MODEL, GEMINI_MODEL))
        await script_memory_step(admin, agents)
        before = await stored_before(client, [a["id"] for a in agents])
        run = await start_run(runs, agents)
        assert run["status"] == "running", run
        # Submitted by the POST, one batch per provider, and not ended yet.
        assert [b["status"] for b in run["progress"]["provider_batches"]] == ["running"] * 3, run
        assert len(await batch_creates(admin)) == 3
    first.kill()
    # The next step's batches end at their first poll.
    await admin.configure(polls_to_end=0, seconds_to_end=0.0)

    second = await servers.start("second")
    async with client_of(second) as client:
        await assert_completed(client, run["id"], providers=3)
        assert len(await batch_creates(admin)) == 6, "a step was submitted twice"
        await assert_exactly_once(client, admin, run["id"], agents, MEMORY_CALL, before)


async def test_killed_while_polling(servers: Servers, admin: EmulatorAdmin, emulator: str) -> None:
    await admin.configure(seconds_to_end=2.0)
    first = await servers.start("first")
    async with client_of(first) as client:
        runs = Runs(client)
        agents = await create_agents(runs)
        await script_memory_step(admin, agents)
        before = await stored_before(client, [a["id"] for a in agents])
        run = await start_run(runs, agents)
        assert run["status"] == "running", run
    # The next retrieve of each batch is answered 429 with retry-after: the SDK waits inside the
    # poller's retrieve call, so the kill lands while the poller is polling (and holds the lease).
    await admin.fault(
        HttpFault(path="/v1/messages/batches/*", method="GET", status=429, retry_after=10, should_retry=True),
        HttpFault(path="/v1/batches/*", method="GET", status=429, retry_after=10, should_retry=True),
    )

    async with httpx.AsyncClient(base_url=emulator) as http:

        async def a_fault_was_taken() -> bool:
            # Queuing no faults answers how many are still pending.
            response = await http.post("/_emulator/faults", json={"faults": []})
            return bool(response.json()["pending"] < 2)

        await wait_for(a_fault_was_taken, "the poller to retrieve a batch")
    await asyncio.sleep(0.2)
    first.kill()
    await admin.configure(seconds_to_end=0.0, faults=[])

    second = await servers.start("second")
    async with client_of(second) as client:
        await assert_completed(client, run["id"])
        assert len(await batch_creates(admin)) == 4, "a step was submitted twice"
        await assert_exactly_once(client, admin, run["id"], agents, MEMORY_CALL, before)


async def test_killed_during_resume(servers: Servers, admin: EmulatorAdmin, tool_log: ToolCallLog) -> None:
    # One provider, so that one resume runs every agent's tool at once (two would run one after the other).
    # Only the first calls must be in flight at the kill: the ones after the restart return at once.
    source = slow_tool_source(tool_log, TOOL_SECONDS, again=0.0)
    # A batch ends at its second retrieve: never inside the POST, always in the poller, which resumes it.
    await admin.configure(polls_to_end=1)
    first = await servers.start("first")
    async with client_of(first) as client:
        runs = Runs(client)
        tool = await create_tool(client, source)
        agents = await create_agents(runs, models=(ANTHROPIC_MODEL,), tool_ids=(tool["id"],))
        await script_slow_step(admin, agents)
        before = await stored_before(client, [a["id"] for a in agents])
        run = await start_run(runs, agents)
        assert run["status"] == "running", run

    async def every_tool_started() -> bool:
        return sum(tool_log.calls().values()) == AGENTS

    await wait_for(every_tool_started, "the slow tools to start")
    await asyncio.sleep(TOOL_SECONDS / 3)
    first.kill()
    assert tool_log.calls() == {a["name"]: 1 for a in agents}

    second = await servers.start("second")
    async with client_of(second) as client:
        await assert_completed(client, run["id"], providers=1)
        # The resume ran again after the restart: the tools ran twice (side effects happen at
        # least once), their results were written once.
        assert tool_log.calls() == {a["name"]: 2 for a in agents}
        assert len(await batch_creates(admin)) == 2, "a step was submitted twice"
        await assert_exactly_once(client, admin, run["id"], agents, SLOW_CALL, before)
