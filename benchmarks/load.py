"""``make load``: how fast the API answers readers, with no run going and while a batch run steps.

Starts the provider emulator (at niceness 19 by default: it stands in for the provider's machines)
and ``nightshift serve`` (a fresh SQLite file, or ``--database-url``) as processes of their own on
the loopback, creates AGENTS agents through the API, then runs CLIENTS concurrent readers for two
phases: with no run going (SECONDS long), and while one batch run over every agent goes through
its two steps (a memory edit, then send_message), until the run ends (at most SECONDS * 10).
Readers loop over what a user or the dashboard reads: one agent, a page of 50 agents, an agent's
last 20 messages, the page of runs and the run, in equal shares (``--mix`` picks some of them).
Each reader has a connection of its own, as separate users would (one shared httpx pool of fifty
connections costs the measuring process more than the server, and its latencies would be the
pool's). It prints the latency percentiles of each phase, the API process's CPU time per request,
and how long the run's steps took.

By default a reader sends its next request as soon as it has the answer (the server saturated:
the figures say how much it serves). With ``--rate R`` each reader sends R requests a second
(``--arrivals poisson``: at random times, R a second on average; ``fixed``: every 1/R s), so the
figures are the latencies at an offered load of CLIENTS x R requests a second. A request is timed
from when it was due, so one that waited for the reader's previous answer counts that wait too;
how late the requests were sent is printed too (a reader waiting for its previous answer, or
this process busy: the part of the latency the server did not spend on the request itself).
``--slow`` prints the percentiles by kind of read, and lists the requests over 100 ms by the
second of the phase they were sent in.
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from benchmarks.bench import ASKS, emulator_process
from nightshift.emulator.environment import sdk_environment
from nightshift.providers.registry import provider_info
from nightshift.serving import free_port

console = Console(width=160)
# A request slower than this is listed by ``--slow`` (when it was sent, how long it took, what it read).
SLOW = 0.1


@dataclass
class Latencies:
    """The answers of one phase: each request's latency and the failed ones."""

    name: str
    seconds: list[float] = field(default_factory=list)
    slow: list[tuple[float, float, str]] = field(default_factory=list)  # (sent at, seconds, path) over SLOW
    late: list[float] = field(default_factory=list)  # how long after it was due each paced request was sent
    kinds: dict[str, list[float]] = field(default_factory=dict)  # each request's latency by kind_of its path
    errors: int = 0
    wall: float = 0.0
    started: float = 0.0  # perf_counter when the phase's timed requests began
    server_cpu: float = 0.0  # CPU seconds the API process spent during the phase

    def percentile(self, share: float, of: list[float] | None = None) -> float:
        ordered = sorted(self.seconds if of is None else of)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) the process ``pid`` has used so far, its children apart."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server_process(database_url: str, home: Path, emulator_url: str) -> Iterator[tuple[str, int]]:
    """``nightshift serve`` in its own process against the emulator; yields its base URL and pid."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTSHIFT_")}
    env.update(
        NIGHTSHIFT_HOME=str(home),
        NIGHTSHIFT_DATABASE_URL=database_url,
        NIGHTSHIFT_POLL_INTERVAL_SECONDS="0.2",
        NIGHTSHIFT_LOG_LEVEL="WARNING",
    )
    env.update(sdk_environment(emulator_url, api_key="load"))
    log = (home / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "nightshift", "serve", "--port", str(port)], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/v1/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"the server did not start; see {home / 'server.log'}")
            time.sleep(0.1)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


async def create_agents(client: httpx.AsyncClient, count: int, model: str) -> list[str]:
    """``count`` agents through the API, 16 requests at a time; their ids."""
    ids: list[str] = []
    gate = asyncio.Semaphore(16)

    async def one(index: int) -> None:
        body = {
            "name": f"load-{index}",
            "model": model,
            "agent_type": "memgpt_v2_agent",  # the loop the figures of docs/performance.md were measured on
            "memory_blocks": [
                {"label": "persona", "value": f"I am load agent {index}.", "limit": 2000},
                {"label": "human", "value": "Nothing known yet.", "limit": 2000},
            ],
        }
        async with gate:
            answer = await client.post("/v1/agents/", json=body)
        answer.raise_for_status()
        ids.append(answer.json()["id"])
        progress.advance(task)

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("creating agents", total=count)
        await asyncio.gather(*(one(i) for i in range(count)))
    return ids


# What a reader reads, by kind: one agent, a page of 50 agents, an agent's last 20 messages, the
# page of runs, the run being stepped (while there is one).
READS = ("agent", "agents", "messages", "runs", "run")


@dataclass(frozen=True)
class Pacing:
    """How often each reader sends: ``rate`` requests a second (0: as soon as it has the last
    answer); and what: a kind of ``mix`` at random, in equal shares."""

    rate: float = 0.0
    arrivals: Literal["poisson", "fixed"] = "poisson"
    mix: tuple[str, ...] = READS

    def first(self) -> float:
        """Seconds from the phase's start to a reader's first request.

        Poisson: a gap like any other (a Poisson process is memoryless), so that the readers
        together send CLIENTS x RATE a second from the first moment. (Each reader's first request
        at a uniform point of its first interval would send more than the offered rate at first,
        and the queue that leaves would be most of each phase's slowest answers.) Fixed: a uniform
        point of the first interval.
        """
        if self.rate <= 0:
            return 0.0
        return random.expovariate(self.rate) if self.arrivals == "poisson" else random.uniform(0, 1 / self.rate)

    def gap(self) -> float:
        """Seconds from one request's due time to the next one's."""
        if self.rate <= 0:
            return 0.0
        return random.expovariate(self.rate) if self.arrivals == "poisson" else 1 / self.rate


async def read(
    client: httpx.AsyncClient,
    agent_ids: list[str],
    run_id: str | None,
    into: Latencies,
    due: float | None = None,
    mix: tuple[str, ...] = READS,
) -> None:
    """One read of what a user looks at, of a kind of ``mix`` (the run only while there is one),
    its latency (from ``due``, if given) added to ``into``."""
    agent_id = random.choice(agent_ids)
    paths = {
        "agent": f"/v1/agents/{agent_id}",
        "agents": "/v1/agents/?limit=50",
        "messages": f"/v1/agents/{agent_id}/messages?limit=20",
        "runs": "/v1/messages/batches?limit=20",
        "run": f"/v1/messages/batches/{run_id}" if run_id is not None else None,
    }
    path = random.choice([p for kind, p in paths.items() if kind in mix and p is not None])
    started = time.perf_counter() if due is None else due
    if due is not None:
        into.late.append(time.perf_counter() - due)
    try:
        answer = await client.get(path)
        failed = answer.status_code >= 400
    except httpx.HTTPError:
        failed = True
    took = time.perf_counter() - started
    into.seconds.append(took)
    into.kinds.setdefault(kind_of(path), []).append(took)
    into.errors += failed
    if took > SLOW:
        into.slow.append((started, took, path))


async def readers(
    url: str,
    server: int,
    clients: int,
    agent_ids: list[str],
    run_id: str | None,
    into: Latencies,
    until: Any,
    pacing: Pacing,
) -> None:
    """``clients`` readers, each on a connection of its own, in a loop until ``until()`` is true.

    Each reader opens its connection with one untimed read before any is timed: fifty clients
    set up at once keep this process busy, which would count as the server's latency (the first
    requests would be sent late by the readers themselves); and the server's first
    read of each kind (its statements compiled, its first page of each table read) is not one a
    phase should count.
    """
    connected = 0
    ready = asyncio.Event()
    # One TLS context for all (the readers speak plain HTTP): httpx makes one per client otherwise,
    # each loading the CA certificates on this process's CPU, which the readers share.
    tls = ssl.create_default_context()
    started, cpu = 0.0, 0.0

    async def reader() -> None:
        nonlocal connected, started, cpu
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits, verify=tls) as client:
            await read(client, agent_ids, run_id, Latencies("warm-up"), mix=pacing.mix)
            connected += 1
            if connected == clients:
                started, cpu = time.perf_counter(), cpu_seconds(server)
                ready.set()
            await ready.wait()
            due = time.perf_counter() + pacing.first()
            while not until():
                if pacing.rate <= 0:
                    await read(client, agent_ids, run_id, into, mix=pacing.mix)
                    continue
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                if until():
                    break
                await read(client, agent_ids, run_id, into, due=due, mix=pacing.mix)
                due += pacing.gap()

    await asyncio.gather(*(reader() for _ in range(clients)))
    into.wall = time.perf_counter() - started
    into.started = started
    into.server_cpu = cpu_seconds(server) - cpu


async def settle(server: int, *, longest: float = 60) -> None:
    """Wait until the server is idle (it imports the providers' SDKs in a thread after it starts,
    CPU that would count against the first phase's requests)."""
    limit, last = time.monotonic() + longest, cpu_seconds(server)
    while time.monotonic() < limit:
        await asyncio.sleep(0.5)
        now = cpu_seconds(server)
        if now - last < 0.025:  # under 5% of a core
            return
        last = now


async def load(
    url: str, server: int, *, agents: int, clients: int, seconds: float, model: str, pacing: Pacing
) -> tuple[list[Latencies], float]:
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=20)) as client:
        agent_ids = await create_agents(client, agents, model)
        await settle(server)
        quiet = Latencies("no run going")
        deadline = time.monotonic() + seconds
        console.print(f"reading with {clients} clients for {seconds:.0f} s, no run going")
        await readers(url, server, clients, agent_ids, None, quiet, lambda: time.monotonic() > deadline, pacing)

        console.print(f"a batch run over {agents:,} agents (two steps), read meanwhile by {clients} clients")
        started = time.perf_counter()
        answer = await client.post(
            "/v1/messages/batches",
            json={"requests": [{"agent_id": a, "input": ASKS["memory"]} for a in agent_ids]},
        )
        answer.raise_for_status()
        run_id = answer.json()["id"]
        ended = asyncio.Event()

        async def watch() -> None:
            limit = time.monotonic() + seconds * 10
            while time.monotonic() < limit:
                run = (await client.get(f"/v1/messages/batches/{run_id}")).json()
                if run["status"] not in ("created", "running"):
                    break
                await asyncio.sleep(0.5)
            ended.set()

        busy = Latencies("while the run steps")
        await asyncio.gather(watch(), readers(url, server, clients, agent_ids, run_id, busy, ended.is_set, pacing))
        run_seconds = time.perf_counter() - started
    return [quiet, busy], run_seconds


def kind_of(path: str) -> str:
    """What a reader's request reads: agent, agents, messages, runs or run."""
    parts = path.split("?")[0].strip("/").split("/")  # v1 agents [id [messages]] | v1 messages batches [id]
    if parts[1] == "agents":
        return {2: "agents", 3: "agent"}.get(len(parts), "messages")
    return "runs" if len(parts) == 3 else "run"


def print_kinds(phases: list[Latencies]) -> None:
    """Each phase's latencies by kind of read."""
    table = Table(title="by kind of read (ms)")
    for column in ("phase", "read", "requests", "p50", "p99", "max"):
        table.add_column(column, justify="left" if column in ("phase", "read") else "right")
    for phase in phases:
        for kind, seconds in sorted(phase.kinds.items()):
            shown = (phase.percentile(0.5, of=seconds), phase.percentile(0.99, of=seconds), max(seconds))
            table.add_row(phase.name, kind, str(len(seconds)), *(f"{v * 1000:.0f}" for v in shown))
    console.print(table)


def print_slow(phase: Latencies) -> None:
    """The requests of ``phase`` over ``SLOW``, by the second of the phase they were sent in."""
    by_second: dict[int, list[tuple[float, str]]] = {}
    for at, took, path in phase.slow:
        by_second.setdefault(int(at - phase.started), []).append((took, kind_of(path)))
    console.print(f"{phase.name}: {len(phase.slow)} requests over {SLOW * 1000:.0f} ms")
    for second, hits in sorted(by_second.items()):
        longest = max(t for t, _ in hits) * 1000
        kinds = ", ".join(sorted({k for _, k in hits}))
        console.print(f"  second {second:>3}: {len(hits):>3}, longest {longest:,.0f} ms ({kinds})")


def main(
    agents: Annotated[int, typer.Option(help="Agents in the organization and in the run")] = 2_000,
    clients: Annotated[int, typer.Option(help="Concurrent readers")] = 50,
    seconds: Annotated[float, typer.Option(help="Length of the quiet phase (the run's phase ends with the run)")] = 20,
    database_url: Annotated[str | None, typer.Option(help="Database (default: a new SQLite file)")] = None,
    provider: Annotated[str, typer.Option(help="Provider the agents use (anthropic, openai, google_ai)")] = "anthropic",
    rate: Annotated[
        float, typer.Option(help="Requests a second per reader (0: the next as soon as the last is answered)")
    ] = 0.0,
    arrivals: Annotated[
        str, typer.Option(help="With --rate: poisson (random times, RATE a second on average) or fixed")
    ] = "poisson",
    mix: Annotated[
        str,
        typer.Option(help=f"What the readers read, in equal shares (comma-separated, of {', '.join(READS)})"),
    ] = ",".join(READS),
    slow: Annotated[
        bool,
        typer.Option(
            help="Print the latencies by kind of read, and the requests over 100 ms by the second they were sent in"
        ),
    ] = False,
    emulator_niceness: Annotated[
        int,
        typer.Option(
            min=0,
            max=19,
            help="The emulator's niceness: it stands in for the provider's servers, whose work is not on "
            "this machine in a real deployment (0: it competes with the server as an equal)",
        ),
    ] = 19,
) -> None:
    """Measure the API's latency under CLIENTS concurrent readers, without and with a run stepping."""
    if rate < 0 or arrivals not in ("poisson", "fixed"):
        raise typer.BadParameter("--rate must be 0 or more and --arrivals poisson or fixed")
    reads = tuple(kind.strip() for kind in mix.split(",") if kind.strip())
    if not reads or set(reads) - set(READS) or set(reads) == {"run"}:
        raise typer.BadParameter(
            f"use some of {', '.join(READS)}, not run alone (the first phase has none)", param_hint="--mix"
        )
    pacing = Pacing(rate=rate, arrivals="fixed" if arrivals == "fixed" else "poisson", mix=reads)
    model = f"{provider}/{provider_info(provider).example_model}"
    with (
        tempfile.TemporaryDirectory() as tmp,
        emulator_process(niceness=emulator_niceness) as (emulator_url, _pid),
    ):
        home = Path(tmp)
        db = database_url or f"sqlite:///{home / 'load.db'}"
        with server_process(db, home, emulator_url) as (url, server):
            phases, run_seconds = asyncio.run(
                load(url, server, agents=agents, clients=clients, seconds=seconds, model=model, pacing=pacing)
            )
    offered = (
        f"each {rate:g} requests/s ({arrivals}), {clients * rate:g} requests/s offered" if rate > 0 else "no pause"
    )
    table = Table(title=f"API latency, {clients} concurrent readers ({offered}), {agents:,} agents")
    columns = ("phase", "requests", "per s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "API CPU ms/req")
    for column in (*columns, "sent late p99 ms") if rate > 0 else columns:
        table.add_column(column, justify="left" if column == "phase" else "right")
    for phase in phases:
        table.add_row(
            phase.name,
            str(len(phase.seconds)),
            f"{len(phase.seconds) / phase.wall:.0f}" if phase.wall else "-",
            *(f"{phase.percentile(p) * 1000:.0f}" for p in (0.5, 0.9, 0.99)),
            f"{max(phase.seconds, default=0) * 1000:.0f}",
            str(phase.errors),
            f"{phase.server_cpu * 1000 / len(phase.seconds):.1f}" if phase.seconds else "-",
            *([f"{phase.percentile(0.99, of=phase.late) * 1000:.0f}"] if rate > 0 else []),
        )
    console.print(table)
    if slow:
        print_kinds(phases)
        for phase in phases:
            print_slow(phase)
    console.print(f"reads: {', '.join(reads)}, in equal shares (the run only while it steps)")
    console.print(f"database: {db.split(':')[0]}; the run took {run_seconds:.1f} s (two steps)")
    console.print("the readers run in this process, on the same machine as the server and the emulator")
    console.print(f"(the emulator at niceness {emulator_niceness});")
    console.print("API CPU: the serve process's own CPU time in the phase (a run's work included) per request")
    if rate > 0:
        console.print("sent late: how long after it was due a request was sent (its reader still waiting for its")
        console.print("previous answer, or this process busy)")


if __name__ == "__main__":
    typer.run(main)
