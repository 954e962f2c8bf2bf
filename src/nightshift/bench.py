"""``make bench``: server time, SQL statements and memory of one batch step over many agents.

Runs against a fresh SQLite file (or ``--database-url``) and the provider emulator in a separate
process, so the figures are nightshift's own: creating the run and submitting its first step,
then polling, storing the results and applying them (tools, memory edits, messages) and writing
the next step. Each agent calls a memory tool with a heartbeat on step 1 and send_message on
step 2, so a step applies real tool calls.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch.steps import RunRequest, create_run
from nightshift.batch.worker import running_worker
from nightshift.config import Settings
from nightshift.domain.agents import LLMConfig, Provider
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.serving import free_port
from nightshift.store.db import create_engine, upgrade
from nightshift.store.orgs import ensure_default_org

console = Console()


@dataclass
class Phase:
    name: str
    seconds: float
    cpu_seconds: float
    statements: int


class StatementCounter:
    """Counts SQL statements sent by an engine (an executemany counts once)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.count = 0
        event.listen(engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any) -> None:
        self.count += 1


@contextmanager
def emulator_process() -> Iterator[str]:
    """``nightshift emulator`` in its own process, so its CPU time is not counted as ours."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nightshift", "emulator", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


async def bench(agents: int, database_url: str, provider: Provider) -> list[Phase]:
    settings = Settings(database_url=database_url, poll_interval_seconds=0.0, poller=False, tool_workers=2)
    engine = create_engine(settings.resolved_database_url)
    await upgrade(engine)
    config = LLMConfig(
        provider=provider, model="claude-3-5-haiku-20241022" if provider is Provider.ANTHROPIC else "gpt-4o-mini"
    )
    async with engine.begin() as conn:
        await ensure_default_org(conn)
        specs = [
            AgentSpec(
                name=f"bench-{i}",
                llm_config=config,
                memory_blocks=[
                    NewBlock(label="persona", value=f"I am bench agent {i}.", limit=2000),
                    NewBlock(label="human", value="Nothing known yet.", limit=2000),
                ],
            )
            for i in range(agents)
        ]
        agent_ids = [a.id for a in await create_agents(conn, DEFAULT_ORG_ID, specs)]
    del specs  # the run is measured with only the ids in hand, as a client would have them
    requests = [
        RunRequest(agent_id=agent_id, messages=("Please remember that my favourite colour is teal.",))
        for agent_id in agent_ids
    ]
    counter = StatementCounter(engine)
    phases: list[Phase] = []
    async with running_worker(settings, engine) as worker:

        async def measure(name: str, work: Any) -> Any:
            before, start, cpu = counter.count, time.perf_counter(), time.process_time()
            result = await work
            phases.append(Phase(name, time.perf_counter() - start, time.process_time() - cpu, counter.count - before))
            return result

        async def submit() -> None:
            async with engine.begin() as conn:
                _run, batches = await create_run(
                    conn,
                    DEFAULT_ORG_ID,
                    requests,
                    callback_url=None,
                    default_max_steps=10,
                    lease=worker.lease(time_now()),
                )
            for batch in batches:
                await worker.submit(batch)

        await measure("create run + submit step 1", submit())
        # A step of more than BATCH_SLICE agents is several provider batches, one claim each.
        await measure("poll + resume step 1 + submit step 2", worker.run_once(limit=1_000))
        await measure("poll + resume step 2 (run ends)", worker.run_once(limit=1_000))
    await engine.dispose()
    return phases


def time_now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def main(
    agents: Annotated[int, typer.Option(help="Agents in the run")] = 10_000,
    database_url: Annotated[str | None, typer.Option(help="Database (default: a new SQLite file)")] = None,
    provider: Annotated[Provider, typer.Option(help="Provider the agents use")] = Provider.ANTHROPIC,
) -> None:
    """Measure one batch run of AGENTS agents, two steps each, and print the figures."""
    with tempfile.TemporaryDirectory() as tmp, emulator_process() as url:
        os.environ.update(
            ANTHROPIC_BASE_URL=url,
            ANTHROPIC_API_KEY="bench",
            OPENAI_BASE_URL=f"{url}/v1",
            OPENAI_API_KEY="bench",
        )
        db = database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        phases = asyncio.run(bench(agents, db, provider))
    table = Table(title=f"one batch run, {agents:,} agents, {provider.value}, {db.split(':')[0]}")
    table.add_column("phase")
    table.add_column("wall s", justify="right")
    table.add_column("server CPU s", justify="right")
    table.add_column("CPU ms per agent", justify="right")
    table.add_column("SQL statements", justify="right")
    for phase in phases:
        table.add_row(
            phase.name,
            f"{phase.seconds:.2f}",
            f"{phase.cpu_seconds:.2f}",
            f"{phase.cpu_seconds * 1000 / agents:.3f}",
            str(phase.statements),
        )
    console.print(table)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    console.print(f"peak memory (RSS) of the server process: {peak:,.0f} MiB")
    console.print(
        "wall time includes waiting for the emulator (another process); server CPU is this process's own "
        "time, SQLite's included (aiosqlite runs it on a thread of this process)"
    )


if __name__ == "__main__":
    typer.run(main)
