"""``make bench``: server time, SQL statements and memory of batch steps over many agents.

Runs against a fresh SQLite file (or ``--database-url``) and the provider emulator in a separate
process, so the figures are nightshift's own: creating the run and submitting its first step,
then polling, storing the results and applying them (tools, memory edits, messages) and writing
the next step. Three runs side by side: in one each agent calls a memory tool on step 1, in the
other a custom tool, which runs in the tool sandbox (a fresh process per call, inside bubblewrap);
both call send_message on step 2. In the third each agent has a sleep-time agent: one turn of the
main agents makes them all due, and the sleep-time run that gathers them takes two steps (a
memory insert of what the user stated, then memory_finish_edits). The agents are new (their
windows hold their first messages) unless ``--history N`` gives each N earlier turns, as agents
that have talked before have: the cost of a step grows with its windows. The sandbox's own CPU (its
zygotes and their call processes) is counted apart from the server's. Each phase's peak memory
(RSS) is its own: the kernel's high-water mark is reset as the phase starts
(``/proc/self/clear_refs``, Linux).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch import sleeptime
from nightshift.batch.steps import queue_batch_run
from nightshift.batch.worker import worker_of
from nightshift.config import Settings
from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.batches import BatchRun, BatchRunRequest
from nightshift.domain.messages import Message, Role, ToolCall, UserInput
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator.environment import sdk_environment
from nightshift.ids import new_id, new_tool_call_id
from nightshift.parts import running_parts
from nightshift.providers.registry import provider_info
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.services.groups import pair
from nightshift.services.tools import create_tool
from nightshift.serving import free_port
from nightshift.store import agents as agent_store
from nightshift.store import messages as message_store
from nightshift.store.batch_run_views import run_progress
from nightshift.store.batch_runs import get_run
from nightshift.store.db import create_engine, upgrade
from nightshift.store.orgs import ensure_default_org

console = Console(width=200)


LOOKUP_TOOL = '''
def lookup_order(order_id: str) -> str:
    """Look up an order's status.

    Args:
        order_id: The order's identifier.
    """
    return f"order {order_id} shipped on {len(order_id) % 28 + 1} May"
'''
# Agents created per transaction while setting up.
SETUP_SLICE = 10_000
# What each agent is asked, by the tool it calls on step 1: the emulator's scripted model
# remembers with core_memory_append, and calls a custom tool the message names.
ASKS = {
    "memory": "Please remember that my favourite colour is teal.",
    "custom": "Please use lookup_order for order 4711.",
    # Main agents with sleep-time agents: the main agent answers (its memory is its sleep-time
    # agent's), then the sleep-time agents read the turn and insert what the user stated.
    "sleeptime": "My name is Ada and I live in Lyon.",
}


def earlier_turns(agent: Agent, turns: int, now: datetime) -> list[Message]:
    """``turns`` exchanges before the run, as an agent that has talked before has in its window:
    the user's message, the assistant's send_message call and its result."""

    def message(role: Role, text: str, **fields: Any) -> Message:
        return Message(
            id=new_id("message"),
            organization_id=agent.organization_id,
            agent_id=agent.id,
            role=role,
            text=text,
            created_at=now,
            **fields,
        )

    made: list[Message] = []
    for turn in range(turns):
        said = json.dumps({"message": f"Noted ({turn})."})
        call = ToolCall(id=new_tool_call_id(), name="send_message", arguments=said)
        made += [
            message(Role.USER, f"Here is what happened on day {turn}: all quiet."),
            message(Role.ASSISTANT, "", tool_calls=(call,)),
            message(
                Role.TOOL, json.dumps({"status": "OK", "message": "None"}), tool_call_id=call.id, name="send_message"
            ),
        ]
    return made


@dataclass
class Phase:
    name: str
    seconds: float
    emulator_cpu_seconds: float  # the provider's: the wall time includes waiting for it
    cpu_seconds: float
    sandbox_cpu_seconds: float
    database_cpu_seconds: float | None  # PostgreSQL's, on this machine; None: in the server (SQLite) or elsewhere
    statements: int
    peak_mib: float | None


def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (Linux); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def peak_rss_mib() -> float:
    """This process's RSS high-water mark: since the last ``reset_peak_rss``, or since it started."""
    try:
        with open("/proc/self/status") as status:
            found = re.search(r"^VmHWM:\s+(\d+) kB", status.read(), re.MULTILINE)
    except OSError:
        found = None
    if found is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return int(found.group(1)) / 1024


class StatementCounter:
    """Counts SQL statements sent by an engine (an executemany counts once)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.count = 0
        event.listen(engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any) -> None:
        self.count += 1


@contextmanager
def emulator_process(*, niceness: int = 0) -> Iterator[tuple[str, int]]:
    """``nightshift emulator`` in its own process, so its CPU time is not counted as ours: (URL, pid).

    ``niceness`` above 0 lowers its priority, so that the provider's work (building a batch's
    results) takes only the CPU the server leaves, as it would on the provider's own machines.
    """
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nightshift", "emulator", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.setpriority(os.PRIO_PROCESS, process.pid, niceness)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/_emulator/health").raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the emulator did not start") from None
                time.sleep(0.1)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def fresh_emulator(url: str) -> None:
    """Forget the last run's batches and keep no logs: the emulator logs every request body and
    model call for tests (20,000 of each), which at 100,000 agents would hold gigabytes."""
    httpx.post(f"{url}/_emulator/reset").raise_for_status()
    httpx.post(f"{url}/_emulator/config", json={"log_limit": 0}).raise_for_status()


def sandbox_cpu_seconds(*, besides: int) -> float:
    """CPU time of every process below this one but ``besides`` (the emulator): the tool sandbox."""
    return sum(tree_cpu_seconds(pid) for pid in _children(os.getpid()) if pid != besides)


def stolen_seconds() -> float:
    """CPU time the hypervisor gave other machines so far (the ``steal`` of ``/proc/stat``), all CPUs."""
    with open("/proc/stat") as stat:
        return int(stat.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU time of the process ``root`` and every process below it, with what they reaped."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, and cutime, cstime: what it used and what its reaped children did.
        total += sum(int(f) for f in fields[11:15])
        pending += _children(pid)
    return total / ticks


def postgres_cpu_seconds() -> float | None:
    """CPU time of the PostgreSQL server's processes on this machine (the postmaster, its backends
    and workers, and those it reaped), or None when none runs here. Every session counts, not only
    this process's: measure on a server nothing else uses."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, found = 0, False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                name, fields = stat.read().split("(", 1)[1].rsplit(")", 1)
        except OSError:
            continue
        if name == "postgres":
            found = True
            total += sum(int(f) for f in fields.split()[11:15])
    return total / ticks if found else None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found += [int(c) for c in children.read().split()]
    except OSError:
        pass
    return found


def set_up(database_url: str, provider: str, tool: str, agents: int, history: int) -> list[str]:
    """Create the database and the agents of a run (see ``bench``); their ids, as a client has them."""
    return asyncio.run(_set_up(database_url, provider, tool, agents, history))


async def _set_up(database_url: str, provider: str, tool: str, agents: int, history: int) -> list[str]:
    engine = create_engine(database_url)
    await upgrade(engine)
    config = LLMConfig(provider=provider, model=provider_info(provider).example_model)
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        tool_ids: list[str] = []
        if tool == "custom":
            tool_ids = [(await create_tool(conn, DEFAULT_ORG_ID, now=datetime.now(UTC), source_code=LOOKUP_TOOL)).id]
    agent_ids: list[str] = []
    # Created a slice at a time, as clients create agents (a request each, or a page of them).
    for start in range(0, agents, SETUP_SLICE):
        specs = [
            AgentSpec(
                name=f"bench-{i}",
                llm_config=config,
                memory_blocks=[
                    NewBlock(label="persona", value=f"I am bench agent {i}.", limit=2000),
                    NewBlock(label="human", value="Nothing known yet.", limit=2000),
                ],
                tool_ids=tool_ids,
                enable_sleeptime=tool == "sleeptime",
            )
            for i in range(start, min(start + SETUP_SLICE, agents))
        ]
        async with engine.begin() as conn:
            made = await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))
            if history:
                earlier = {a.id: earlier_turns(a, history, datetime.now(UTC)) for a in made}
                await message_store.insert_messages(conn, [m for ms in earlier.values() for m in ms])
                made = [replace(a, message_ids=(*a.message_ids, *(m.id for m in earlier[a.id]))) for a in made]
                await agent_store.set_windows(conn, made, datetime.now(UTC))  # counted at the first step
            if tool == "sleeptime":  # due after every turn: the main run's one turn makes them all due
                await pair(conn, DEFAULT_ORG_ID, made, now=datetime.now(UTC), frequency=1)
            agent_ids += [a.id for a in made]
    await engine.dispose()
    return agent_ids


async def bench(
    agents: int, database_url: str, provider: str, tool: str, emulator_pid: int, *, history: int = 0
) -> tuple[list[Phase], str]:
    """The phases of one run, and how the run ended (its status, its agents by outcome); each agent
    starts with ``history`` earlier turns in its window."""
    # A lease longer than any phase: at the default (20 poll intervals of 0 s, so 5 s) a lease is
    # renewed every 1.7 s of a stage, and those statements would count as the phase's.
    settings = Settings(
        database_url=database_url, poll_interval_seconds=0.0, poller=False, tool_workers=2, lease_seconds=3600.0
    )
    # Set up in a process of its own: what it leaves in the allocator (hundreds of MiB with long
    # windows) would otherwise be this process's resident memory through every phase.
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as setter:
        made = setter.submit(set_up, settings.resolved_database_url, provider, tool, agents, history)
        agent_ids = made.result()
    engine = create_engine(settings.resolved_database_url)
    requests = [BatchRunRequest(agent_id=agent_id, messages=(UserInput(text=ASKS[tool]),)) for agent_id in agent_ids]
    counter = StatementCounter(engine)
    phases: list[Phase] = []
    async with running_parts(settings, engine) as parts:
        worker = worker_of(parts)

        async def measure(name: str, work: Any) -> Any:
            reset = reset_peak_rss()
            before, start, cpu = counter.count, time.perf_counter(), time.process_time()
            emulator = tree_cpu_seconds(emulator_pid)
            sandbox = sandbox_cpu_seconds(besides=emulator_pid)
            database = postgres_cpu_seconds() if engine.dialect.name == "postgresql" else None
            result = await work
            database_after = postgres_cpu_seconds() if database is not None else None
            phases.append(
                Phase(
                    name,
                    time.perf_counter() - start,
                    tree_cpu_seconds(emulator_pid) - emulator,
                    time.process_time() - cpu,
                    sandbox_cpu_seconds(besides=emulator_pid) - sandbox,
                    database_after - database if database is not None and database_after is not None else None,
                    counter.count - before,
                    peak_rss_mib() if reset else None,
                )
            )
            return result

        created: list[BatchRun] = []

        async def create() -> None:
            async with engine.begin() as conn:
                run = await queue_batch_run(
                    conn, DEFAULT_ORG_ID, requests, now=datetime.now(UTC), callback_url=None, default_max_steps=10
                )
            created.append(run)

        await measure("create the run (requests queued: the POST)", create())
        await measure("write step 1 + submit it (the poller)", worker.start_queued_runs())
        # A step of more than BATCH_SLICE agents is several provider batches, one claim each.
        if tool == "sleeptime":
            await measure("poll + resume step 1 (turns end: sleep-time agents due)", worker.run_once(limit=1_000))

            async def gather() -> None:
                created.extend(await sleeptime.gather(engine, parts.clock))

            await measure("gather the due sleep-time agents (a run queued)", gather())
            await measure("write sleep-time step 1 + submit it", worker.start_queued_runs())
            await measure("poll + resume sleep-time step 1 (memory_insert)", worker.run_once(limit=1_000))
            await measure("poll + resume sleep-time step 2 (run ends)", worker.run_once(limit=1_000))
        else:
            await measure(f"poll + resume step 1 ({tool} tool) + submit step 2", worker.run_once(limit=1_000))
            await measure("poll + resume step 2 (run ends)", worker.run_once(limit=1_000))
    endings = []
    for run in created:
        async with engine.connect() as conn:
            ended = await get_run(conn, DEFAULT_ORG_ID, run.id)
            progress = await run_progress(conn, run.id)
        outcomes = ", ".join(f"{count:,} {outcome.value}" for outcome, count in sorted(progress.outcomes.items()))
        status = ended.status.value if ended else "gone"
        kind = f"{tool} ({run.kind.value})" if tool == "sleeptime" else tool
        steps = f"{outcomes or 'none applied'}, {progress.running:,} not applied"
        endings.append(f"the {kind} run ended {status}; its agents' steps: {steps}")
    await engine.dispose()
    return phases, "\n".join(endings)


def _per_agent(seconds: float | None, agents: int) -> str:
    return "-" if seconds is None else f"{seconds * 1000 / agents:.3f}"


def time_now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def main(
    agents: Annotated[int, typer.Option(help="Agents in each run")] = 10_000,
    database_url: Annotated[str | None, typer.Option(help="Database (default: a new SQLite file per run)")] = None,
    provider: Annotated[str, typer.Option(help="Provider the agents use (anthropic, openai, google_ai)")] = "anthropic",
    tools: Annotated[
        str, typer.Option(help="Which runs, of memory, custom and sleeptime (comma-separated)")
    ] = "memory,custom,sleeptime",
    history: Annotated[
        int, typer.Option(help="Earlier turns in each agent's window before its run (3 messages each)", min=0)
    ] = 0,
) -> None:
    """Measure batch runs of AGENTS agents, two steps each, and print the figures."""
    kinds = [t.strip() for t in tools.split(",") if t.strip()]
    unknown = sorted(set(kinds) - set(ASKS))
    if unknown or not kinds:
        raise typer.BadParameter(f"unknown {unknown}; use memory, custom, sleeptime", param_hint="--tools")
    provider_info(provider)  # an unknown name stops here, naming the known ones
    table = Table(title=f"batch runs of {agents:,} agents, {provider}")
    columns = (
        "phase",
        "wall s",
        "emulator CPU s",
        "server CPU s",
        "server CPU ms/agent",
        "sandbox CPU ms/agent",
        "database CPU ms/agent",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "phase" else "right")
    table.add_column("SQL statements", justify="right")
    table.add_column("peak RSS MiB", justify="right")
    peak_of_phases: list[float | None] = []
    endings: list[str] = []
    stolen, started = stolen_seconds(), time.monotonic()
    with emulator_process() as (url, emulator_pid):
        os.environ.update(sdk_environment(url, api_key="bench"))
        for kind in kinds:
            fresh_emulator(url)
            with tempfile.TemporaryDirectory() as tmp:
                db = database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
                phases, ending = asyncio.run(bench(agents, db, provider, kind, emulator_pid, history=history))
                endings.append(ending)
                for phase in phases:
                    peak_of_phases.append(phase.peak_mib)
                    table.add_row(
                        phase.name,
                        f"{phase.seconds:.2f}",
                        f"{phase.emulator_cpu_seconds:.2f}",
                        f"{phase.cpu_seconds:.2f}",
                        f"{phase.cpu_seconds * 1000 / agents:.3f}",
                        f"{phase.sandbox_cpu_seconds * 1000 / agents:.3f}",
                        _per_agent(phase.database_cpu_seconds, agents),
                        str(phase.statements),
                        f"{phase.peak_mib:,.0f}" if phase.peak_mib is not None else "-",
                    )
            table.add_section()
    console.print(table)
    for ending in endings:
        console.print(ending)
    console.print(f"database: {(database_url or 'sqlite (a new file per run)').split(':')[0]}")
    console.print(f"each agent's window before its run: its first messages and {history} earlier turns")
    # The phases' peaks are each their own; the process's, where they cannot be told apart, covers
    # the set-up as well.
    peaks = [p for p in peak_of_phases if p is not None]
    peak = max(peaks) if peaks else peak_rss_mib()
    console.print(f"peak memory (RSS) of the server process: {peak:,.0f} MiB")
    stolen = (stolen_seconds() - stolen) / ((time.monotonic() - started) * (os.cpu_count() or 1))
    console.print(f"the hypervisor took {stolen:.0%} of this machine's CPU time meanwhile (steal: wall times grow)")
    console.print(
        "wall time includes waiting for the emulator (another process, whose CPU is the provider's work); "
        "server CPU is this process's own time, SQLite's included (aiosqlite runs it on a thread of this "
        "process); sandbox CPU is the tool sandbox's processes (bubblewrap, the zygotes and one process per "
        "custom tool call); database CPU is PostgreSQL's processes on this machine, all of them (- for SQLite, "
        "whose work is the server's)"
    )


if __name__ == "__main__":
    typer.run(main)
