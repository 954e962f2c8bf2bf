"""``make deadline``: how long a run whose batches have stragglers takes, with and without a
deadline, and what taking the stragglers over costs.

The emulator (a process of its own) processes each batch's requests over ``--bulk-minutes`` and
holds ``--held-back`` of them (picked by a hash of the agent) back for an hour. A run of
``--agents`` agents of ``--model``, each told two facts to remember (it saves one per step, then answers: three
steps), goes through a server of this process, driven pass by pass: time is not waited for, the
server's clock and the emulator's are moved together to the next moment something is due; five
one-agent runs with no straggler come first, so that the server knows the provider's usual
turnaround. The same run is made without a deadline, then with ``--deadline-minutes``. Prints each run's time on that
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
HOUR = 3_600.0
# The poller's gaps, as a server would run: polled at most every 30 s, at least every 5.
POLL_INTERVAL_SECONDS = 30.0
POLL_MIN_SECONDS = 5.0
# One-agent runs (no request held back) before the measured one, so that the server knows the
# provider's usual turnaround.
WARM_RUNS = 5


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


class Runner:
    """A server of this process with its worker moved by hand and its clock moved with the emulator's."""

    def __init__(self, http: httpx.AsyncClient, worker: Worker, clock: SharedClock, model: LLMConfig) -> None:
        self.http, self.worker, self.clock, self.model = http, worker, clock, model

    async def agents(self, count: int, tag: str) -> list[str]:
        specs = [
            AgentSpec(
                name=f"{tag}-{i}",
                agent_type=AgentType.MEMGPT_V2,
                llm_config=self.model,
                memory_blocks=[NewBlock(label="human", value="A customer.", limit=5_000)],
            )
            for i in range(count)
        ]
        async with self.worker.engine.begin() as conn:
            return [a.id for a in await create_agents(conn, DEFAULT_ORG_ID, specs, now=self.clock.now())]

    async def run(self, agent_ids: list[str], text: str, deadline: timedelta | None = None) -> dict[str, Any]:
        """A run of these agents driven to its end, passing when something is due; returns it."""
        body: dict[str, Any] = {
            "requests": [{"agent_id": a, "messages": [{"role": "user", "content": text}]} for a in agent_ids]
        }
        if deadline is not None:
            body["finish_within_seconds"] = deadline.total_seconds()
        response = await self.http.post("/v1/messages/batches", json=body)
        response.raise_for_status()
        run_id = response.json()["id"]
        while True:
            handled = await self.worker.start_queued_runs() + await self.worker.run_once(limit=100)
            run: dict[str, Any] = (await self.http.get(f"/v1/messages/batches/{run_id}")).json()
            if run["status"] not in ("created", "running"):
                assert run["status"] == "completed", run
                return run
            if not handled:
                await self.clock.advance(timedelta(seconds=max(1.0, await self.worker.next_pass_in())))


async def one_run(
    admin: EmulatorAdmin, model: LLMConfig, agents: int, held_back: float, deadline: timedelta | None
) -> Outcome:
    """The run of ``agents`` new agents of ``model`` on a fresh server, after its warm runs."""
    with tempfile.TemporaryDirectory() as tmp:
        async with server(admin, Path(tmp)) as (http, worker, clock):
            runner = Runner(http, worker, clock, model)
            await admin.configure(held_back_fraction=0.0)
            for i in range(WARM_RUNS):
                await runner.run(await runner.agents(1, f"warm{i}"), "hello")
            await admin.configure(held_back_fraction=held_back, held_back_seconds=HOUR)
            ids = await runner.agents(agents, "keeper")
            cpu, started = time.process_time(), clock.now()
            run = await runner.run(ids, "remember: my name is Ana; I live in Oslo", deadline)
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


async def measure(
    url: str, *, model: LLMConfig, agents: int, bulk: timedelta, held_back: float, deadline: timedelta
) -> list[Outcome]:
    async with EmulatorAdmin(url) as admin:
        found = []
        for limit in (None, deadline):
            await admin.reset()
            await admin.configure(seconds_to_end=bulk.total_seconds())
            found.append(await one_run(admin, model, agents, held_back, limit))
        return found


def main(
    model: Annotated[
        str, typer.Option(help="The agents' model, provider/model")
    ] = "anthropic/claude-3-5-haiku-20241022",
    agents: Annotated[int, typer.Option(help="Agents in the run")] = 1_000,
    bulk_minutes: Annotated[float, typer.Option(help="Minutes in which a batch processes its requests")] = 2.0,
    held_back: Annotated[float, typer.Option(help="Share of each batch's requests held back an hour")] = 0.02,
    deadline_minutes: Annotated[float, typer.Option(help="The deadline of the second run")] = 10.0,
) -> None:
    """Run the same three-step run without a deadline and with one, and print what each took and cost."""
    deadline = timedelta(minutes=deadline_minutes)
    provider, _, name = model.partition("/")
    # One call a turn: each fact is saved by a step of its own.
    config = LLMConfig(provider=provider, model=name, parallel_tool_calls=False)
    with emulator_process() as (url, _pid):
        os.environ.update(sdk_environment(url, api_key="deadline"))
        outcomes = asyncio.run(
            measure(
                url,
                model=config,
                agents=agents,
                bulk=timedelta(minutes=bulk_minutes),
                held_back=held_back,
                deadline=deadline,
            )
        )
    table = Table(
        title=f"{agents} agents of {model}, 3 steps; each batch done in {bulk_minutes:g} min, but {held_back:.0%}"
        " an hour late"
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
