"""``make cost``: what a task costs under each cache policy (``NIGHTSHIFT_CACHE_POLICY``) and through
the normal API, for tasks of 1, 3 and 10 steps, by agents that share a long system prompt or not.

Each task shape is run by ``--agents`` agents through a batch run on a server of this process,
driven pass by pass, its provider the emulator (a process of its own, prices the price data's). Time
is not waited for: every batch takes ``--turnaround`` minutes, on the server's clock and on the
emulator's (whose prompt cache forgets an entry its lifetime after its last use), and the agents come
back to a task hours later. Every agent runs its task twice: the first time it is new (the policy has
nothing to go by), the second time its window shows how many steps it takes. The normal API's
figure is the same tasks sent to the agents one by one (``POST /v1/agents/{id}/messages``, the
default policy). Prints the cost of 1,000 tasks in USD and what ``auto`` marked, step by step.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import groupby
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from benchmarks.bench import emulator_process
from nightshift.api.app import create_app
from nightshift.api.deps import AppState
from nightshift.batch.worker import Worker
from nightshift.config import Settings
from nightshift.domain.agents import AgentType, LLMConfig
from nightshift.domain.caching import CachePolicy
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.domain.usage import Usage
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from nightshift.emulator.environment import sdk_environment
from nightshift.pricing import PriceTable
from nightshift.services.agents import AgentSpec, NewBlock, create_agents

console = Console(width=160)
MODEL = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022")
HANDLE = f"{MODEL.provider}/{MODEL.model}"
# Anthropic caches no prefix shorter than this on Claude Haiku 3.5.
CACHE_MIN_TOKENS = 2_048
# About 3,000 tokens of instructions, the "long system prompt".
INSTRUCTIONS = "Answer as the support desk of a bicycle shop; check the order history before you answer. " * 140
STEPS = [1, 3, 10]
POLICIES = (CachePolicy.ONE_HOUR, CachePolicy.FIVE_MINUTES, CachePolicy.OFF, CachePolicy.AUTO)
# Between two tasks of an agent: every cache entry is gone.
BETWEEN_TASKS = timedelta(hours=3)
# One-agent runs before the measured ones, so that the server knows the provider's turnaround.
WARM_RUNS = 5


class SharedClock:
    """The server's clock (the machine's, plus what was let pass), moved with the emulator's."""

    def __init__(self, admin: EmulatorAdmin) -> None:
        self._admin = admin
        self._ahead = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self._ahead

    def monotonic(self) -> float:
        return time.monotonic() + self._ahead.total_seconds()

    async def advance(self, by: timedelta) -> None:
        self._ahead += by
        await self._admin.advance(by.total_seconds())


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    steps: int
    shared: bool

    @property
    def name(self) -> str:
        return f"{self.steps} step{'s' * (self.steps > 1)}, {'one shared' if self.shared else 'own'} system prompt"


@dataclass(slots=True)
class Costs:
    """USD per 1,000 tasks: first (new agents), again (agents that did it before)."""

    first: float = 0.0
    again: float = 0.0


def replies(steps: int) -> list[ScriptedReply]:
    """A task of ``steps`` requests: searches that ask for another step, then an answer."""
    search = ScriptedToolCall(
        name="conversation_search", arguments={"query": "a refund before 2020"}, request_heartbeat=True
    )
    answer = ScriptedToolCall(name="send_message", arguments={"message": "Done."}, request_heartbeat=False)
    return [ScriptedReply(tool_call=search)] * (steps - 1) + [ScriptedReply(tool_call=answer)]


class Server:
    """A server of this process with one cache policy, its worker moved by hand."""

    def __init__(self, state: AppState, http: httpx.AsyncClient, clock: SharedClock, admin: EmulatorAdmin) -> None:
        self.state, self.http, self.clock, self.admin = state, http, clock, admin
        self.worker: Worker = state.worker

    async def agents(self, count: int, *, shared: bool, tag: str) -> list[str]:
        """``count`` agents made at one instant (their compiled system prompts alike when shared)."""
        specs = [
            AgentSpec(
                name=f"{tag}-{i}",
                agent_type=AgentType.MEMGPT_V2,
                llm_config=MODEL,
                system=INSTRUCTIONS if shared else f"You are desk agent {tag}-{i}.\n{INSTRUCTIONS}",
                memory_blocks=[NewBlock(label="human", value="A customer.", limit=5_000)],
            )
            for i in range(count)
        ]
        async with self.state.engine.begin() as conn:
            return [a.id for a in await create_agents(conn, DEFAULT_ORG_ID, specs, now=self.clock.now())]

    async def batch_task(self, agent_ids: Sequence[str], steps: int, turnaround: timedelta) -> float:
        """One batch run of the task for every agent; returns its cost in USD."""
        for agent_id in agent_ids:
            await self.admin.script(agent_id, *replies(steps))
        body = {
            "requests": [
                {"agent_id": a, "messages": [{"role": "user", "content": "Where is my order?"}]} for a in agent_ids
            ]
        }
        response = await self.http.post("/v1/messages/batches", json={**body, "max_steps": steps})
        response.raise_for_status()
        run_id = response.json()["id"]
        while True:
            handled = await self.worker.start_queued_runs() + await self.worker.run_once()
            run = (await self.http.get(f"/v1/messages/batches/{run_id}")).json()
            if run["status"] not in ("created", "running"):
                assert run["status"] == "completed", run
                return float(run["progress"]["cost_usd"])
            if not handled:
                await self.clock.advance(turnaround)

    async def normal_task(self, agent_ids: Sequence[str], steps: int) -> float:
        """The task sent to each agent through the normal API; returns what it cost in USD."""
        prices, total = PriceTable(), 0.0
        for agent_id in agent_ids:
            await self.admin.script("*", *replies(steps))
            response = await self.http.post(
                f"/v1/agents/{agent_id}/messages",
                json={"messages": [{"role": "user", "content": "Where is my order?"}], "max_steps": steps},
            )
            response.raise_for_status()
            used = response.json()["usage"]
            read, written = used["cached_input_tokens"] or 0, used["cache_write_tokens"] or 0
            usage = Usage(
                input_tokens=used["prompt_tokens"] - read - written,
                output_tokens=used["completion_tokens"],
                cache_read_tokens=read,
                cache_write_tokens=written,
            )
            cost = prices.cost(HANDLE, usage, batch=False)
            assert cost is not None
            total += cost.usd
        return total

    async def marks(self, agent_id: str) -> list[str]:
        """The lifetime of the system prompt's mark in each of the agent's batch requests ("-": none)."""
        calls = await self.admin.model_calls(custom_id=agent_id)
        return [(c["body"]["system"][-1].get("cache_control") or {}).get("ttl", "-") for c in calls]


def in_runs(marks: Sequence[str]) -> str:
    """``1h 1h 1h -`` as ``1h x3, - x1``."""
    return ", ".join(f"{ttl} x{len(list(run))}" for ttl, run in groupby(marks))


@asynccontextmanager
async def server(policy: CachePolicy, admin: EmulatorAdmin, home: Path) -> AsyncIterator[Server]:
    settings = Settings(home=home, database_url=f"sqlite:///{home / 'cost.db'}", poller=False, cache_policy=policy)
    clock = SharedClock(admin)
    app = create_app(settings, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.cost", timeout=60) as http:
            yield Server(app.state.nightshift, http, clock, admin)


async def measure(
    url: str, *, agents: int, steps: Sequence[int], turnaround: timedelta
) -> tuple[dict[Shape, dict[str, Costs]], dict[Shape, tuple[str, str]]]:
    shapes = [Shape(steps=s, shared=shared) for s in steps for shared in (False, True)]
    costs: dict[Shape, dict[str, Costs]] = {shape: {} for shape in shapes}
    chosen: dict[Shape, tuple[str, str]] = {}  # auto's marks: first task, again
    per_thousand = 1_000 / agents
    async with EmulatorAdmin(url) as admin:
        await admin.configure(cache_min_tokens=CACHE_MIN_TOKENS)
        for policy in POLICIES:
            with tempfile.TemporaryDirectory() as tmp:
                async with server(policy, admin, Path(tmp)) as running:
                    for i in range(WARM_RUNS):
                        await running.batch_task(await running.agents(1, shared=False, tag=f"warm{i}"), 1, turnaround)
                    for shape in shapes:
                        ids = await running.agents(
                            agents, shared=shape.shared, tag=f"{policy}-{shape.steps}-{shape.shared}"
                        )
                        found = costs[shape].setdefault(policy.value, Costs())
                        await running.clock.advance(BETWEEN_TASKS)
                        found.first = await running.batch_task(ids, shape.steps, turnaround) * per_thousand
                        await running.clock.advance(BETWEEN_TASKS)
                        found.again = await running.batch_task(ids, shape.steps, turnaround) * per_thousand
                        if policy is CachePolicy.AUTO:
                            marks = await running.marks(ids[0])
                            chosen[shape] = (in_runs(marks[: shape.steps]), in_runs(marks[shape.steps :]))
                            normal = costs[shape].setdefault("normal API", Costs())
                            await running.clock.advance(BETWEEN_TASKS)
                            normal.first = await running.normal_task(ids, shape.steps) * per_thousand
                            await running.clock.advance(BETWEEN_TASKS)
                            normal.again = await running.normal_task(ids, shape.steps) * per_thousand
    return costs, chosen


def print_tables(
    costs: dict[Shape, dict[str, Costs]], chosen: dict[Shape, tuple[str, str]], *, agents: int, turnaround: timedelta
) -> None:
    columns = [p.value for p in POLICIES] + ["normal API"]
    minutes = turnaround.total_seconds() / 60
    for first, title in ((False, "agents that did the task before"), (True, "new agents (their first task)")):
        table = Table(title=f"USD per 1,000 tasks, {title}; {agents} agents a shape, batches of {minutes:g} min")
        table.add_column("task")
        for column in columns:
            table.add_column(column, justify="right")
        table.add_column("cheapest fixed", justify="right")
        table.add_column("auto's system mark, request by request")
        for shape, found in costs.items():
            figures = {name: (c.first if first else c.again) for name, c in found.items()}
            fixed = min(figures[p.value] for p in POLICIES if p is not CachePolicy.AUTO)
            cells = [f"{figures[name]:.3f}" for name in columns]
            table.add_row(shape.name, *cells, f"{fixed:.3f}", chosen[shape][0 if first else 1])
        console.print(table)


def main(
    agents: Annotated[int, typer.Option(help="Agents per task shape")] = 20,
    steps: Annotated[list[int] | None, typer.Option(help="Steps of a task (repeat for several shapes)")] = None,
    turnaround: Annotated[float, typer.Option(help="Minutes each provider batch takes")] = 20.0,
) -> None:
    """Run every task shape under every cache policy and through the normal API, and print the costs."""
    with emulator_process() as (url, _pid):
        os.environ.update(sdk_environment(url, api_key="cost"))
        took = timedelta(minutes=turnaround)
        costs, chosen = asyncio.run(measure(url, agents=agents, steps=steps or STEPS, turnaround=took))
    print_tables(costs, chosen, agents=agents, turnaround=took)


if __name__ == "__main__":
    typer.run(main)
