"""``make sandbox``: what one custom tool call costs in the tool sandbox, part by part.

Three measurements, each on this machine's bubblewrap (or ``--process``: plain processes):

* **the floor**: a bare ``fork()`` and ``_exit()`` of an interpreter that has loaded the zygote's
  module (its imports and what it builds at import), started as the zygote is. No call can cost
  less while each runs in a fresh process;
* **one call at a time** through :class:`~nightshift.tools.sandbox.ToolSandbox` with one worker;
* **calls side by side**: ``run_many`` over every worker, as a batch step runs them.

For each: the wall time per call, the server's CPU (framing the call, the pipes, decoding the
answer), the zygote's own CPU (the fork's parent side, watching the call, killing what it left,
wiping the scratch directories) and its calls' processes' (the fork's child side, reading the call,
lowering its limits, running the tool, answering, exiting), and the page faults of each. After a
fork every page is shared, so each page a process then writes costs a fault, and in the call's
process a copy: the faults show what a change saves where CPU time, on a shared machine, is too
noisy to. The call is ``make bench``'s custom tool. CPU and faults are read from ``/proc``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from benchmarks.bench import LOOKUP_TOOL, _children, stolen_seconds
from nightshift.config import SandboxKind, Settings
from nightshift.tools.launch import BIND_NOW, ZYGOTE_SCRIPT
from nightshift.tools.results import SandboxCall, SandboxResult
from nightshift.tools.sandbox import ToolSandbox, build_sandbox

console = Console(width=160)

# Run by a fresh interpreter started as the zygote is: load the zygote's module, then fork and
# exit FORKS times, and print what the parent and its children spent, as the fields of Spent.
FLOOR = """
import importlib.util, json, os, resource, sys
spec = importlib.util.spec_from_file_location("zygote", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))

def now():
    times = os.times()
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return [times.user + times.system, times.children_user + times.children_system, own.ru_minflt, reaped.ru_minflt]

before = now()
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
after = now()
fields = ("zygote", "calls", "zygote_faults", "call_faults")
print(json.dumps({field: b - a for field, a, b in zip(fields, before, after)}))
"""


@dataclass(frozen=True, slots=True)
class Spent:
    """What the sandbox's processes spent: CPU seconds and page faults."""

    zygote: float = 0.0  # the zygotes' own
    calls: float = 0.0  # what they reaped: their calls' processes
    bubblewrap: float = 0.0
    zygote_faults: int = 0
    call_faults: int = 0

    def __sub__(self, other: Spent) -> Spent:
        return Spent(
            self.zygote - other.zygote,
            self.calls - other.calls,
            self.bubblewrap - other.bubblewrap,
            self.zygote_faults - other.zygote_faults,
            self.call_faults - other.call_faults,
        )


def sandbox_spent() -> Spent:
    """What this process's sandboxes spent so far (bubblewrap has reaped no zygote while its pool is open)."""
    ticks = os.sysconf("SC_CLK_TCK")
    zygote = calls = bubblewrap = zygote_faults = call_faults = 0
    pending = _children(os.getpid())
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/stat") as stat:
                name, fields = stat.read().split("(", 1)[1].rsplit(")", 1)
        except OSError:
            continue
        faults, reaped_faults, _, _, utime, stime, cutime, cstime = (int(f) for f in fields.split()[7:15])
        if name == "bwrap":
            bubblewrap += utime + stime + cutime + cstime
        else:
            zygote, calls = zygote + utime + stime, calls + cutime + cstime
            zygote_faults, call_faults = zygote_faults + faults, call_faults + reaped_faults
        pending += _children(pid)
    return Spent(zygote / ticks, calls / ticks, bubblewrap / ticks, zygote_faults, call_faults)


def floor(forks: int) -> Spent:
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", FLOOR, str(ZYGOTE_SCRIPT), str(forks)],
        env={**os.environ, BIND_NOW[0]: BIND_NOW[1]},  # as the zygote starts
        check=True,
        capture_output=True,
        text=True,
    )
    return Spent(**json.loads(done.stdout))


def calls_of(count: int) -> list[SandboxCall]:
    return [
        SandboxCall(
            organization_id="org-bench",
            source_code=LOOKUP_TOOL,
            function_name="lookup_order",
            arguments={"order_id": f"{index:06d}"},
        )
        for index in range(count)
    ]


async def timed(sandbox: ToolSandbox, count: int, *, side_by_side: bool) -> tuple[float, float, Spent]:
    """Wall and server CPU seconds of ``count`` calls, and what the sandbox spent, after a warm-up."""
    _check(await sandbox.run_many(calls_of(50)))
    calls = calls_of(count)
    cpu, spent, start = time.process_time(), sandbox_spent(), time.perf_counter()
    if side_by_side:
        results = await sandbox.run_many(calls)
    else:
        results = [await sandbox.run(call) for call in calls]
    wall, cpu, spent = time.perf_counter() - start, time.process_time() - cpu, sandbox_spent() - spent
    _check(results)
    return wall, cpu, spent


def _check(results: list[SandboxResult]) -> None:
    if failed := next((r.error for r in results if not r.ok), None):
        raise RuntimeError(f"the sandbox failed a call: {failed}")


async def measure(settings: Settings, count: int) -> list[tuple[str, float, float, Spent]]:
    rows = []
    for workers, side_by_side in ((1, False), (settings.tool_workers, True)):
        async with build_sandbox(settings.model_copy(update={"tool_workers": workers})) as sandbox:
            name = f"run_many on {workers} workers" if side_by_side else "one call at a time"
            rows.append((name, *await timed(sandbox, count, side_by_side=side_by_side)))
    return rows


def main(
    count: Annotated[int, typer.Option("--calls", help="Calls in each measurement")] = 3_000,
    workers: Annotated[int, typer.Option(help="Workers of the side-by-side measurement")] = 2,
    process: Annotated[bool, typer.Option("--process", help="Plain processes instead of bubblewrap")] = False,
) -> None:
    """Time COUNT custom tool calls through the sandbox, part by part, beside a bare fork's floor."""
    if count < 1 or workers < 1:
        raise typer.BadParameter("--calls and --workers must be at least 1")
    stolen, start = stolen_seconds(), time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'sandbox.db'}",
            home=Path(tmp),
            tool_workers=workers,
            tool_sandbox=SandboxKind.PROCESS if process else SandboxKind.BUBBLEWRAP,
        )
        rows = [("bare fork + exit (the floor)", None, None, floor(count)), *asyncio.run(measure(settings, count))]
    stolen = (stolen_seconds() - stolen) / ((time.monotonic() - start) * (os.cpu_count() or 1))
    table = Table(title=f"a custom tool call in the sandbox ({settings.tool_sandbox.value}), per call")
    for column in ("", "wall ms", "server CPU ms", "zygote CPU ms", "call process CPU ms", "sandbox CPU ms"):
        table.add_column(column, justify="right")
    table.add_column("page faults: zygote", justify="right")
    table.add_column("call process", justify="right")
    for name, wall, server, spent in rows:
        table.add_row(
            name,
            *(f"{seconds * 1000 / count:.3f}" if seconds is not None else "" for seconds in (wall, server)),
            *(f"{seconds * 1000 / count:.3f}" for seconds in (spent.zygote, spent.calls)),
            f"{(spent.zygote + spent.calls + spent.bubblewrap) * 1000 / count:.3f}",
            f"{spent.zygote_faults / count:.0f}",
            f"{spent.call_faults / count:.0f}",
        )
    console.print(table)
    console.print(
        f"{count:,} calls each (the floor: forks); sandbox CPU is the zygotes', their calls' processes' and "
        f"bubblewrap's; the floor's interpreter runs outside any sandbox; the hypervisor took {stolen:.0%} of "
        "this machine's CPU time meanwhile (steal: wall times grow with it)"
    )


if __name__ == "__main__":
    typer.run(main)
