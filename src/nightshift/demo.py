"""``nightshift demo``: fifty agents, one batch run, several steps, watched live.

The server and (unless ``--real``) the provider emulator run in this process; ``--provider``
picks whose models the agents run on (the first registered provider's by default). The database
is a SQLite file of the demo's own, ``$NIGHTSHIFT_HOME/demo.db``, made afresh each time (the
server's database is left alone). Each agent gets a persona, memory blocks and a custom tool, and
one message that takes it through three steps: it calls the tool, saves the result to its memory,
then tells the user.

Then the sleep-time part: a few agents made with ``enable_sleeptime`` hear their users introduce
themselves over two turns (a batch run each), and one sleep-time run (``POST /v1/sleeptime/run``)
has their sleep-time agents keep what the users said in the shared ``human`` blocks: the table
shows each block before and after, and the run's cost.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from nightshift.api.app import create_app
from nightshift.cli_commands import views
from nightshift.config import Settings
from nightshift.emulator.config import EmulatorConfig
from nightshift.emulator.environment import sdk_environment
from nightshift.emulator.server import running_emulator
from nightshift.providers.registry import ProviderInfo, providers
from nightshift.serving import running_server

DICE_TOOL = '''
def roll_dice(sides: int = 20, count: int = 1) -> str:
    """Roll dice for a story, a game or a decision.

    Args:
        sides: Number of sides on each die.
        count: How many dice to roll.
    """
    import random

    rolls = [random.randint(1, sides) for _ in range(count)]
    return f"rolled {rolls} (total {sum(rolls)}) on {count}d{sides}"
'''

NAMES = [
    "Ada", "Basil", "Cleo", "Dmitri", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jonah",
    "Kaia", "Luca", "Mira", "Nnamdi", "Odile", "Pavel", "Quinn", "Rosa", "Soren", "Tala",
    "Umar", "Vera", "Wen", "Xavi", "Yara", "Zeno", "Amara", "Bruno", "Chiara", "Dario",
    "Elin", "Felix", "Gaia", "Hugo", "Isla", "Joaquin", "Keira", "Leon", "Maya", "Niko",
    "Olga", "Pia", "Rafa", "Sana", "Theo", "Uma", "Viggo", "Wanda", "Yusuf", "Zoe",
]  # fmt: skip
ROLES = [
    "lighthouse keeper who logs every storm",
    "botanist cataloguing alpine flowers",
    "chess coach for stubborn beginners",
    "night-shift baker who loves sourdough",
    "retired sea captain full of tall tales",
    "librarian who recommends one book at a time",
    "game master running a dungeon crawl",
    "jazz pianist who improvises answers",
    "astronomer counting meteors",
    "beekeeper tracking seven hives",
]
# The sleep-time part's users and what each says about themselves, one turn at a time.
SLEEPTIME_USERS = [
    ("Ada", "My name is Ada.", "I live in Lyon. I love jazz."),
    ("Basil", "Hello, my name is Basil!", "I work as a nurse. I prefer green tea."),
    ("Cleo", "Hi, my name is Cleo.", "I live in Oslo. My favourite book is Dune."),
    ("Dmitri", "My name is Dmitri.", "I work at a bakery. I like chess."),
    ("Esme", "Hey there. My name is Esme.", "I live in Porto. I enjoy surfing."),
]
SLEEPTIME_HUMAN = "The user has not introduced themselves yet."
MOODS = ["cheerful", "dry-witted", "patient", "curious", "blunt"]
INTERESTS = ["board games", "hiking", "old maps", "tea", "birdwatching", "cycling", "poetry", "robots"]


def fresh_demo_database(home: Path) -> str:
    """The URL of the demo's own SQLite file under ``home``, emptied of an earlier demo."""
    path = home / "demo.db"
    for leftover in (path, path.with_name("demo.db-wal"), path.with_name("demo.db-shm")):
        leftover.unlink(missing_ok=True)
    return f"sqlite:///{path}"


def personas(count: int) -> list[dict[str, Any]]:
    """Agent bodies with distinct names, personas and human blocks."""
    bodies = []
    for i in range(count):
        name = NAMES[i % len(NAMES)] + ("" if i < len(NAMES) else f"-{i // len(NAMES)}")
        role, mood = ROLES[i % len(ROLES)], MOODS[(i // len(ROLES)) % len(MOODS)]
        bodies.append(
            {
                "name": f"demo-{name.lower()}",
                # The memgpt loop: the demo shows heartbeats carrying an agent through several steps.
                "agent_type": "memgpt_v2_agent",
                "memory_blocks": [
                    {"label": "persona", "value": f"I am {name}, a {mood} {role}.", "limit": 2000},
                    {
                        "label": "human",
                        "value": f"The user likes {INTERESTS[i % len(INTERESTS)]}.",
                        "limit": 2000,
                        "description": "What I know about the user",
                    },
                ],
                "tags": ["demo"],
            }
        )
    return bodies


@contextmanager
def provider_environment(provider: ProviderInfo, *, real: bool) -> Iterator[str]:
    """Point the SDKs at an in-process emulator, or (``real``) leave them at the provider. Yields a label."""
    if real:
        yield f"{provider.name} (real API, batch pricing)"
        return
    # Batches end after a few polls, so the steps can be watched.
    with running_emulator(EmulatorConfig(polls_to_end=3)) as url:
        variables = sdk_environment(url)
        saved = {k: os.environ.get(k) for k in variables}
        os.environ.update(variables)
        try:
            yield f"the built-in emulator at {url} (as {provider.name})"
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def run_demo(
    settings: Settings,
    console: Console,
    *,
    provider: ProviderInfo | None = None,
    real: bool = False,
    agents: int = 50,
) -> int:
    """Run the demo; returns the exit code (0 when the run completed)."""
    provider = provider or providers()[0]
    if real and not os.environ.get(provider.key_variable):
        console.print(
            f"[red]{provider.key_variable} is not set.[/] Export it to run the demo against {provider.name}, "
            "or run `nightshift demo` without --real to use the built-in emulator."
        )
        return 1
    model = provider.example_handle
    settings = settings.model_copy(update={"poll_interval_seconds": 10.0 if real else 0.2})
    console.rule("[bold]nightshift demo")
    with provider_environment(provider, real=real) as where:
        console.print(f"provider: {where}")
        console.print(f"model:    {model}")
        console.print(f"database: {settings.resolved_database_url}")
        with running_server(create_app(settings)) as base, httpx.Client(base_url=base, timeout=60) as http:
            console.print(f"server:   {base} (dashboard at {base}/, API docs at {base}/docs)")
            run = _start(http, console, model, agents)
            final = _watch(http, console, run["id"], agents)
            _summary(http, console, final)
            slept = _sleeptime(http, console, model)
    console.print("\n[bold]Next[/]: to look at this run in the dashboard, serve the demo's database")
    console.print(
        f"  NIGHTSHIFT_DATABASE_URL={shlex.quote(str(settings.database_url))} nightshift serve",
        soft_wrap=True,
        highlight=False,
    )
    console.print(
        "and open http://127.0.0.1:8283/ (or `nightshift batch list` and `nightshift batch messages <run id>` "
        "against it); README.md tells how to run against a real provider."
    )
    return 0 if final["status"] == slept["status"] == "completed" else 1


def _start(http: httpx.Client, console: Console, model: str, count: int) -> dict[str, Any]:
    tool = http.put("/v1/tools/", json={"source_code": DICE_TOOL}).raise_for_status().json()
    created = []
    with console.status(f"creating {count} agents with their memory and the roll_dice tool..."):
        for body in personas(count):
            body = {**body, "model": model, "tool_ids": [tool["id"]]}
            created.append(http.post("/v1/agents/", json=body).raise_for_status().json())
    console.print(f"created {len(created)} agents, e.g. {created[0]['name']}: {created[0]['blocks'][0]['value']}")
    requests = [
        {
            "agent_id": agent["id"],
            "messages": [
                {"role": "user", "content": "Please use roll_dice for tonight's adventure and remember the result."}
            ],
        }
        for agent in created
    ]
    run: dict[str, Any] = http.post("/v1/messages/batches", json={"requests": requests}).raise_for_status().json()
    console.print(f"batch run [bold]{run['id']}[/] submitted: one provider batch per step")
    return run


def _watch(http: httpx.Client, console: Console, run_id: str, total: int) -> dict[str, Any]:
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("agents done", total=total)
    status = Table.grid(padding=(0, 2))
    run: dict[str, Any] = {}
    with Live(Group(progress, status), console=console, refresh_per_second=8) as live:
        while True:
            run = http.get(f"/v1/messages/batches/{run_id}").raise_for_status().json()
            p = run["progress"]
            agents = p["agents"]
            progress.update(task, completed=agents["finished"] + agents["failed"] + agents["cancelled"])
            usage = p["usage"]
            tokens_in = usage.get("input_tokens", 0) + usage.get("cache_read_tokens", 0)
            status = Table.grid(padding=(0, 2))
            status.add_row(
                f"step {views.shown_step(p['step'])}",
                f"active {agents['running']}",
                f"finished {agents['finished']}",
                f"failed {agents['failed']}",
            )
            status.add_row(
                f"tokens {tokens_in:,} in / {usage.get('output_tokens', 0):,} out",
                f"cost {views.money(p['cost_usd'])}",
                f"without batch {views.money(p['cost_without_batch_usd'])}",
                "",
            )
            live.update(Group(progress, status))
            if run["status"] not in ("created", "running"):
                return run
            time.sleep(0.2)


def _summary(http: httpx.Client, console: Console, run: dict[str, Any]) -> None:
    p = run["progress"]
    usage = p["usage"]
    table = Table(title=f"batch run {run['id']}: {run['status']}")
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("steps (provider batches)", f"{views.shown_step(p['step'])} ({len(p['provider_batches'])})")
    table.add_row("agents finished / failed", f"{p['agents']['finished']} / {p['agents']['failed']}")
    table.add_row("input tokens (cache read / write)", f"{usage.get('input_tokens', 0):,} "
                  f"({usage.get('cache_read_tokens', 0):,} / {usage.get('cache_write_tokens', 0):,})")  # fmt: skip
    table.add_row("output tokens", f"{usage.get('output_tokens', 0):,}")
    table.add_row("cost with batch", f"{views.money(p['cost_usd'])}")
    table.add_row(
        "same work without batch",
        f"{views.money(p['cost_without_batch_usd'])} ({views.saving(p['batch_savings_usd'])})",
    )
    table.add_row("prompt cache", views.saving(p["cache_savings_usd"]))
    console.print(table)
    first = http.get(f"/v1/messages/batches/{run['id']}/messages", params={"order": "asc", "limit": 1})
    found = first.raise_for_status().json()["messages"]
    if not found:
        return
    agent_id = found[0]["agent_id"]
    params = {"order": "asc", "limit": 20, "agent_id": agent_id}
    messages = http.get(f"/v1/messages/batches/{run['id']}/messages", params=params).raise_for_status().json()
    lines = Table(title="one agent's run, step by step")
    lines.add_column("role")
    lines.add_column("what")
    for message in messages["messages"]:
        text = " ".join(part.get("text", "") for part in message["content"] if part["type"] == "text")
        calls = ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in message["tool_calls"])
        lines.add_row(message["role"], (calls or text)[:150])
    console.print(lines)
    human = http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human").raise_for_status().json()
    console.print(f"its human memory block now reads: [italic]{human['value']!r}[/]")


def _sleeptime(http: httpx.Client, console: Console, model: str) -> dict[str, Any]:
    """The sleep-time part: agents that talk, then one sleep-time run that keeps what was said."""
    console.rule("[bold]sleep-time agents")
    mains = []
    for name, _, _ in SLEEPTIME_USERS:
        body = {
            "name": f"demo-pal-of-{name.lower()}",
            "model": model,
            "agent_type": "memgpt_v2_agent",
            "enable_sleeptime": True,
            "memory_blocks": [
                {"label": "persona", "value": "I am a friendly companion.", "limit": 2000},
                {"label": "human", "value": SLEEPTIME_HUMAN, "limit": 2000},
            ],
            "tags": ["demo", "sleeptime"],
        }
        mains.append(http.post("/v1/agents/", json=body).raise_for_status().json())
    console.print(
        f"created {len(mains)} agents with enable_sleeptime, each paired with a sleep-time agent "
        f"sharing its memory, e.g. {mains[0]['name']} and {mains[0]['name']}-sleeptime"
    )
    before = {m["id"]: _human_value(http, m["id"]) for m in mains}
    for turn in (1, 2):
        requests = [
            {"agent_id": main["id"], "messages": [{"role": "user", "content": said[turn]}]}
            for main, said in zip(mains, SLEEPTIME_USERS, strict=True)
        ]
        run = http.post("/v1/messages/batches", json={"requests": requests}).raise_for_status().json()
        with console.status(f"turn {turn}: batch run {run['id']}..."):
            ended = _ended(http, run["id"])
        console.print(f"turn {turn}: each user says e.g. [italic]{SLEEPTIME_USERS[0][turn]!r}[/]: {ended['status']}")
    (run,) = http.post("/v1/sleeptime/run", json={"all": True}).raise_for_status().json()
    console.print(f"sleep-time run [bold]{run['id']}[/]: the {len(mains)} sleep-time agents in one batch")
    final = _watch(http, console, run["id"], len(mains))
    table = Table(title=f"memory kept by sleep-time run {run['id']}: {final['status']}")
    table.add_column("agent", style="bold")
    table.add_column("human block before")
    table.add_column("human block after")
    for main in mains:
        table.add_row(main["name"], before[main["id"]], _human_value(http, main["id"]))
    console.print(table)
    p = final["progress"]
    console.print(
        f"sleep-time run: {views.shown_step(p['step'])} steps, cost {views.money(p['cost_usd'])} "
        f"(without batch {views.money(p['cost_without_batch_usd'])}, {views.saving(p['batch_savings_usd'])})",
        highlight=False,
    )
    return final


def _human_value(http: httpx.Client, agent_id: str) -> str:
    block = http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human").raise_for_status().json()
    return str(block["value"])


def _ended(http: httpx.Client, run_id: str) -> dict[str, Any]:
    """The run once it is no longer created or running."""
    while True:
        run: dict[str, Any] = http.get(f"/v1/messages/batches/{run_id}").raise_for_status().json()
        if run["status"] not in ("created", "running"):
            return run
        time.sleep(0.2)
