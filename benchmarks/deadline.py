"""``make deadline``: how long a run whose batches have stragglers takes, with and without a
deadline, and what taking the stragglers over costs.

The emulator (a process of its own) processes each batch's requests over ``--bulk-minutes`` and
holds ``--held-back`` of them (picked by a hash of the agent) back for an hour. A run of
``--agents`` agents, each told two facts to remember (it saves one per step, then answers: three
steps), goes through a server of this process, driven pass by pass: time is not waited for, the
server's clock and the emulator's are moved together to the next moment something is due. The same
run is made without a deadline, then with ``--deadline-minutes``. Prints each run's time on that
clock, the requests taken over, the run's cost, what the take-over cost above the batch price, and
what the run's tokens would have cost through the normal API.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from benchmarks.bench import emulator_process
from benchmarks.cost import SharedClock
from nightshift.api.app import create_app
from nightshift.batch.worker import Worker
from nightshift.config import Settings
from nightshift.domain.agents import AgentType, LLMConfig
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.environment import sdk_environment
from nightshift.services.agents import AgentSpec, NewBlock, create_agents

console = Console(width=160)
# One call a turn: each fact is saved by a step of its own.
MODEL = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022", parallel_tool_calls=False)
HOUR = 3_600.0
# The poller's gaps, as a server would run: polled at most every 30 s, at least every 5.
POLL_INTERVAL_SECONDS = 30.0
POLL_MIN_SECONDS = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    took: timedelta
    steps: int
    taken_over: list[int]  # by step
    cost_usd: float
    takeover_usd: float
    without_batch_usd: float
    cpu_seconds: float


@asynccontextmanager
async def server(admin: EmulatorAdmin, home: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Worker, SharedClock]]:
    settings = Settings(
        home=home,
        database_url=f"sqlite:///{home / 'deadline.db'}",
        poller=False,
        poll_interval_seconds=POLL_INTERVAL_SECONDS,
        poll_min_seconds=POLL_MIN_SECONDS,
    )
    clock = SharedClock(admin)
    app = create_app(settings, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.deadline", timeout=120) as http:
            yield http, app.state.nightshift.worker, clock


async def one_run(admin: EmulatorAdmin, agents: int, deadline: timedelta | None) -> Outcome:
    """The run of ``agents`` new agents on a fresh server, driven to its end."""
    with tempfile.TemporaryDirectory() as tmp:
        async with server(admin, Path(tmp)) as (http, worker, clock):
            specs = [
                AgentSpec(
                    name=f"keeper-{i}",
                    agent_type=AgentType.MEMGPT_V2,
                    llm_config=MODEL,
                    memory_blocks=[NewBlock(label="human", value="A customer.", limit=5_000)],
                )
                for i in range(agents)
            ]
            async with worker.engine.begin() as conn:
                ids = [a.id for a in await create_agents(conn, DEFAULT_ORG_ID, specs, now=clock.now())]
            facts = "remember: my name is Ana; I live in Oslo"
            body: dict[str, Any] = {
                "requests": [{"agent_id": i, "messages": [{"role": "user", "content": facts}]} for i in ids]
            }
            if deadline is not None:
                body["finish_within_seconds"] = deadline.total_seconds()
            cpu, started = time.process_time(), clock.now()
            response = await http.post("/v1/messages/batches", json=body)
            response.raise_for_status()
            run_id = response.json()["id"]
            while True:
                handled = await worker.start_queued_runs() + await worker.run_once(limit=100)
                run = (await http.get(f"/v1/messages/batches/{run_id}")).json()
                if run["status"] not in ("created", "running"):
                    assert run["status"] == "completed", run
                    break
                if not handled:
                    await clock.advance(timedelta(seconds=max(1.0, await worker.next_pass_in())))
            progress = run["progress"]
            return Outcome(
                took=clock.now() - started,
                steps=progress["step"] + 1,
                taken_over=[
                    sum(b["taken_over"] for b in progress["provider_batches"] if b["step_number"] == step)
                    for step in range(progress["step"] + 1)
                ],
                cost_usd=progress["cost_usd"],
                takeover_usd=progress["takeover_usd"],
                without_batch_usd=progress["cost_without_batch_usd"],
                cpu_seconds=time.process_time() - cpu,
            )


async def measure(url: str, *, agents: int, bulk: timedelta, held_back: float, deadline: timedelta) -> list[Outcome]:
    async with EmulatorAdmin(url) as admin:
        found = []
        for limit in (None, deadline):
            await admin.reset()
            await admin.configure(
                seconds_to_end=bulk.total_seconds(), held_back_fraction=held_back, held_back_seconds=HOUR
            )
            found.append(await one_run(admin, agents, limit))
        return found


def main(
    agents: Annotated[int, typer.Option(help="Agents in the run")] = 1_000,
    bulk_minutes: Annotated[float, typer.Option(help="Minutes in which a batch processes its requests")] = 2.0,
    held_back: Annotated[float, typer.Option(help="Share of each batch's requests held back an hour")] = 0.02,
    deadline_minutes: Annotated[float, typer.Option(help="The deadline of the second run")] = 10.0,
) -> None:
    """Run the same three-step run without a deadline and with one, and print what each took and cost."""
    deadline = timedelta(minutes=deadline_minutes)
    with emulator_process() as (url, _pid):
        os.environ.update(sdk_environment(url, api_key="deadline"))
        outcomes = asyncio.run(
            measure(url, agents=agents, bulk=timedelta(minutes=bulk_minutes), held_back=held_back, deadline=deadline)
        )
    table = Table(
        title=f"{agents} agents, 3 steps; each batch done in {bulk_minutes:g} min, but {held_back:.0%} an hour late"
    )
    for column in (
        "run",
        "took",
        "steps",
        "taken over, by step",
        "cost (USD)",
        "take-over cost",
        "normal API",
        "server CPU",
    ):
        table.add_column(column, justify="left" if column == "run" else "right")
    for name, found in zip(("no deadline", f"deadline in {deadline_minutes:g} min"), outcomes, strict=True):
        table.add_row(
            name,
            f"{found.took.total_seconds() / 60:.1f} min",
            str(found.steps),
            " + ".join(map(str, found.taken_over)),
            f"{found.cost_usd:.4f}",
            f"{found.takeover_usd:.4f}",
            f"{found.without_batch_usd:.4f}",
            f"{found.cpu_seconds:.1f} s",
        )
    console.print(table)


if __name__ == "__main__":
    typer.run(main)
