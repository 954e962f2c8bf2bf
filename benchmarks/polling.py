"""``make polling``: how soon a run's provider batches are found ended, and how many polls that
takes, polled at one fixed interval and on the poll schedule (``domain/polling.py``).

The emulator (a process of its own) ends each batch ``--batch-seconds`` after its create. A
poller on this process's event loop steps a run of ``--agents`` agents through ``--steps`` steps,
first with ``NIGHTSHIFT_POLL_MIN_SECONDS`` equal to the interval (every batch polled at the
interval, as before the schedule), then with ``--shortest``. Before each measured run, five
one-agent runs end, so that the schedule knows the provider's turnaround. Prints the measured
run's wall time and the polls (batch retrieves) it took.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.bench import emulator_process
from nightshift.batch.callbacks import CallbackRules
from nightshift.batch.poller import poll_forever
from nightshift.batch.steps import queue_batch_run
from nightshift.batch.worker import worker_of
from nightshift.config import Settings
from nightshift.domain.agents import AgentType, LLMConfig
from nightshift.domain.batches import BatchRunRequest, BatchRunStatus
from nightshift.domain.messages import UserInput
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from nightshift.emulator.environment import sdk_environment
from nightshift.parts import running_parts
from nightshift.providers.base import BatchStatus, ModelProvider
from nightshift.providers.clients import ProviderSet
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.store import batch_runs as batch_run_store
from nightshift.store.db import create_engine, upgrade
from nightshift.store.orgs import ensure_default_org

console = Console(width=160)
MODEL = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022")
# One-agent runs that end before the measured one: the turnaround the schedule reads.
WARM_RUNS = 5


class CountedPolls:
    """A provider that counts the batch retrieves (polls) asked of it, and passes everything on."""

    def __init__(self, provider: ModelProvider) -> None:
        self.provider = provider
        self.polls = 0

    async def retrieve_batch(self, provider_batch_id: str) -> BatchStatus:
        self.polls += 1
        return await self.provider.retrieve_batch(provider_batch_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.provider, name)


@dataclass(frozen=True, slots=True)
class Measured:
    seconds: float
    polls: int


def replies(steps: int) -> list[ScriptedReply]:
    """``steps`` answers: memory edits that ask for another step, then a message."""
    remember = ScriptedToolCall(
        name="core_memory_append", arguments={"label": "human", "content": "noted"}, request_heartbeat=True
    )
    done = ScriptedToolCall(name="send_message", arguments={"message": "done"}, request_heartbeat=False)
    return [ScriptedReply(tool_call=remember)] * (steps - 1) + [ScriptedReply(tool_call=done)]


async def until_ended(engine: AsyncEngine, run_ids: list[str]) -> None:
    """Wait until every one of these runs has ended."""
    open_statuses = (BatchRunStatus.CREATED, BatchRunStatus.RUNNING)
    while True:
        async with engine.connect() as conn:
            runs = [await batch_run_store.get_run(conn, DEFAULT_ORG_ID, run_id) for run_id in run_ids]
        if all(r is not None and r.status not in open_statuses for r in runs):
            return
        await asyncio.sleep(0.05)


async def measure(
    database_url: str, emulator_url: str, *, agents: int, steps: int, interval: float, shortest: float
) -> Measured:
    settings = Settings(
        database_url=database_url, poll_interval_seconds=interval, poll_min_seconds=shortest, poller=False
    )
    engine = create_engine(settings.resolved_database_url)
    await upgrade(engine)
    admin = EmulatorAdmin(emulator_url)
    try:
        async with engine.begin() as conn:
            await ensure_default_org(conn, datetime.now(UTC))
            specs = [
                AgentSpec(
                    name=f"agent-{i}",
                    agent_type=AgentType.MEMGPT_V2,
                    llm_config=MODEL,
                    memory_blocks=[NewBlock(label="human", value="Nothing yet.", limit=5_000)],
                )
                for i in range(agents + WARM_RUNS)
            ]
            ids = [a.id for a in await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))]
        warm, measured = ids[:WARM_RUNS], ids[WARM_RUNS:]
        for agent_id in warm:
            await admin.script(agent_id, *replies(1))
        for agent_id in measured:
            await admin.script(agent_id, *replies(steps))

        async def queue(agent_ids: list[str]) -> str:
            requests = [BatchRunRequest(agent_id=a, messages=(UserInput(text="Note this."),)) for a in agent_ids]
            async with engine.begin() as conn:
                run = await queue_batch_run(
                    conn, DEFAULT_ORG_ID, requests, now=datetime.now(UTC), callback_url=None, default_max_steps=steps
                )
            return run.id

        async with (
            ProviderSet() as real,
            running_parts(
                settings,
                engine,
                providers={"anthropic": cast(ModelProvider, counted := CountedPolls(real.get("anthropic")))},
            ) as parts,
        ):
            worker = worker_of(parts)
            poller = asyncio.create_task(poll_forever(worker, CallbackRules.of(settings), queue_seconds=0.05))
            try:
                await until_ended(engine, [await queue([a]) for a in warm])
                polls_before = counted.polls
                started = time.monotonic()
                await until_ended(engine, [await queue(measured)])
                seconds = time.monotonic() - started
                polls = counted.polls - polls_before
            finally:
                worker.draining.set()
                await poller
        return Measured(seconds=seconds, polls=polls)
    finally:
        await admin.aclose()
        await engine.dispose()


def main(
    agents: Annotated[int, typer.Option(help="Agents in the measured run")] = 100,
    steps: Annotated[int, typer.Option(help="Steps each agent takes")] = 3,
    batch_seconds: Annotated[float, typer.Option(help="A batch ends this long after its create")] = 6.0,
    interval: Annotated[float, typer.Option(help="NIGHTSHIFT_POLL_INTERVAL_SECONDS")] = 30.0,
    shortest: Annotated[float, typer.Option(help="NIGHTSHIFT_POLL_MIN_SECONDS of the schedule")] = 1.0,
) -> None:
    """Step one run at a fixed interval, then on the schedule, and print both."""
    table = Table(title=f"{agents} agents, {steps} steps, each batch ends {batch_seconds:g} s after its create")
    for column in ("polling", "run wall time s", "polls"):
        table.add_column(column, justify="left" if column == "polling" else "right")
    with emulator_process() as (url, _pid):
        os.environ.update(sdk_environment(url, api_key="polling"))
        for name, minimum in (
            (f"every {interval:g} s (fixed)", interval),
            (f"schedule, {shortest:g}-{interval:g} s", shortest),
        ):
            asyncio.run(EmulatorAdmin(url).configure(seconds_to_end=batch_seconds))
            with tempfile.TemporaryDirectory() as tmp:
                database_url = f"sqlite:///{Path(tmp) / 'polling.db'}"
                done = asyncio.run(
                    measure(database_url, url, agents=agents, steps=steps, interval=interval, shortest=minimum)
                )
            table.add_row(name, f"{done.seconds:.1f}", str(done.polls))
    console.print(table)


if __name__ == "__main__":
    typer.run(main)
