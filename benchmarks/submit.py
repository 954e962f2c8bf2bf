"""``make submit``: what a run's start costs end to end, black-box, from the POST until the provider has the batch.

Starts the provider emulator and ``nightshift serve`` (a fresh SQLite file, or ``--database-url``)
as processes of their own on the loopback, as ``make load`` does, and creates AGENTS agents through
the API. Then, ROUNDS times: ``POST /v1/messages/batches`` with a message for every agent, and the
time from the moment it was sent until the emulator had the provider batch's whole body (the
time it logs for the batch's create request, on this machine's clock: the emulator's own parsing
of the body is the provider's time, not nightshift's), then the run is cancelled, which
frees its agents for the next round. The first round is the server's first run (its provider
clients made, its statements compiled); the others are what a server that has run before costs.
With ``--new-agents`` each round's run is of AGENTS agents made for it (before its clock starts),
which the server has never stepped: nothing of them is in its poller's caches.
Each round prints the POST's own answer time, the time until the provider has the batch, that
time per agent, and the CPU of the server's processes (the API, its poller) per agent.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from benchmarks.bench import ASKS, emulator_process, fresh_emulator, tree_cpu_seconds
from benchmarks.load import create_agents, server_process, settle
from nightshift.providers.registry import provider_info

console = Console(width=160)
# The path of each provider's batch create, as the emulator logs it.
BATCH_CREATES = {
    "anthropic": "/v1/messages/batches",
    "openai": "/v1/batches",
}


async def provider_received(emulator: httpx.AsyncClient, path: str, sent: float, *, longest: float = 300) -> float:
    """When the emulator received the first batch create after ``sent`` (Unix seconds), once it has."""
    limit = time.monotonic() + longest
    query: dict[str, str | float] = {"path": path, "method": "POST", "since": sent}
    while time.monotonic() < limit:
        logged = (await emulator.get("/_emulator/requests", params=query)).json()["data"]
        if logged:
            return float(logged[0]["received_at"])
        await asyncio.sleep(0.02)
    raise RuntimeError(f"the provider received no batch within {longest:.0f} s")


async def cancelled(client: httpx.AsyncClient, run_id: str) -> None:
    """Cancel the run and wait until it says so (its agents are then free for another run)."""
    (await client.patch(f"/v1/messages/batches/{run_id}/cancel")).raise_for_status()
    for _ in range(600):
        if (await client.get(f"/v1/messages/batches/{run_id}")).json()["status"] == "cancelled":
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"run {run_id} was not cancelled within a minute")


async def rounds(
    url: str, emulator_url: str, server: int, *, agents: int, count: int, provider: str, new_agents: bool
) -> Table:
    which = "new agents each round" if new_agents else "the same agents each round"
    table = Table(title=f"starting a run of {agents:,} agents, {provider}, {which}, black-box")
    for column in ("round", "POST answered ms", "provider has it s", "ms per agent", "server CPU ms per agent"):
        table.add_column(column, justify="right")
    path = BATCH_CREATES[provider]
    limits = httpx.Limits(max_connections=20)
    async with (
        httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client,
        httpx.AsyncClient(base_url=emulator_url, timeout=60) as emulator,
    ):
        model = f"{provider}/{provider_info(provider).example_model}"
        agent_ids = await create_agents(client, agents, model)
        warm: list[tuple[float, float, float]] = []
        for index in range(1, count + 1):
            if new_agents and index > 1:
                agent_ids = await create_agents(client, agents, model)
            body = {"requests": [{"agent_id": a, "input": ASKS["memory"]} for a in agent_ids]}
            await settle(server)
            cpu, sent = tree_cpu_seconds(server), time.time()
            answer = await client.post("/v1/messages/batches", json=body)
            answered = time.time() - sent
            answer.raise_for_status()
            received = await provider_received(emulator, path, sent)
            cpu = tree_cpu_seconds(server) - cpu  # the looks at the emulator's log cost the server nothing
            figures = (answered, received - sent, cpu)
            table.add_row(str(index), *_shown(figures, agents))
            if index > 1:
                warm.append(figures)
            await cancelled(client, answer.json()["id"])
    if warm:
        table.add_section()
        medians = tuple(statistics.median(figure) for figure in zip(*warm, strict=True))
        table.add_row(f"median of 2-{count}", *_shown(medians, agents))
    return table


def _shown(figures: tuple[float, ...], agents: int) -> tuple[str, ...]:
    answered, took, cpu = figures
    return f"{answered * 1000:.0f}", f"{took:.3f}", f"{took * 1000 / agents:.3f}", f"{cpu * 1000 / agents:.3f}"


def main(
    agents: Annotated[int, typer.Option(help="Agents in each run")] = 1_000,
    count: Annotated[int, typer.Option("--rounds", help="Runs started one after the other")] = 5,
    database_url: Annotated[str | None, typer.Option(help="Database (default: a new SQLite file)")] = None,
    provider: Annotated[str, typer.Option(help="Provider the agents use (anthropic, openai)")] = "anthropic",
    new_agents: Annotated[
        bool, typer.Option("--new-agents", help="Each round's run of agents the server has not stepped before")
    ] = False,
) -> None:
    """Time ROUNDS runs of AGENTS agents from the POST until the provider has the batch."""
    if provider not in BATCH_CREATES:
        raise typer.BadParameter(f"use one of {', '.join(BATCH_CREATES)}", param_hint="--provider")
    if agents < 1 or count < 1:
        raise typer.BadParameter("--agents and --rounds must be at least 1")
    with tempfile.TemporaryDirectory() as tmp, emulator_process(niceness=19) as (emulator_url, _):
        fresh_emulator(emulator_url)
        httpx.post(f"{emulator_url}/_emulator/config", json={"log_limit": 100}).raise_for_status()
        db = database_url or f"sqlite:///{Path(tmp) / 'submit.db'}"
        with server_process(db, Path(tmp), emulator_url) as (url, server):
            table = asyncio.run(
                rounds(url, emulator_url, server, agents=agents, count=count, provider=provider, new_agents=new_agents)
            )
    console.print(table)
    console.print(
        f"database: {db.split(':')[0]}; the time is from the POST's sending until the emulator received the "
        "batch (the API answers at once; its poller writes the first step and submits it); server CPU is "
        "the serve process and its children (the poller)"
    )


if __name__ == "__main__":
    typer.run(main)
