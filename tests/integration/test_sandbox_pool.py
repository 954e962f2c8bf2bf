"""The tool sandbox's pool shared among organizations, with real zygotes and real tools.

The calls here run as plain processes (the process launcher): the point is the pool, and only
there can a tool tell the test that it started (a line in a file of the test's folder) and wait
until the test lets it end (a file the test creates), so that the tests follow who runs when
without timing anything.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nightshift.config import SandboxKind, Settings
from nightshift.tools.launch import ProcessLauncher, SandboxLimits
from nightshift.tools.results import SandboxCall, SandboxResult
from nightshift.tools.sandbox import ToolSandbox, build_sandbox

HELD = '''
import os
import time

def tool(name: str, folder: str) -> str:
    """Writes its name to the folder's log as it starts, then runs until the test releases it."""
    with open(os.path.join(folder, "started"), "a") as log:
        log.write(name + "\\n")
    while not os.path.exists(os.path.join(folder, "release-" + name)):
        time.sleep(0.005)
    return name
'''
# Long enough that no held call times out on a loaded machine before the test releases it.
LIMITS = SandboxLimits(timeout=120.0)


def held(folder: Path, name: str, org: str) -> SandboxCall:
    return SandboxCall(
        organization_id=org, source_code=HELD, function_name="tool", arguments={"name": name, "folder": str(folder)}
    )


def release(folder: Path, *names: str) -> None:
    for name in names:
        (folder / f"release-{name}").touch()


async def started(folder: Path, count: int) -> list[str]:
    """The names of the calls that started, in order, once at least ``count`` have."""
    log = folder / "started"
    async with asyncio.timeout(60):
        while True:
            names = log.read_text().split() if log.exists() else []
            if len(names) >= count:
                return names
            await asyncio.sleep(0.01)


async def test_another_organization_gets_the_first_worker_that_frees(tmp_path: Path) -> None:
    # Organization a fills both workers with a batch step of ten calls and queues six calls from
    # the API. b's one call must run on the first worker that frees, ahead of all of a's backlog
    # (before, it waited for every call queued before it: 29 s behind six sleeping calls); then
    # a's first API call, ahead of the rest of its own batch step.
    async with ToolSandbox(ProcessLauncher(), workers=2, limits=LIMITS) as sandbox:
        step = asyncio.create_task(sandbox.run_many([held(tmp_path, f"s{i}", "org-a") for i in range(10)]))
        running = await started(tmp_path, 2)  # alone, a uses every worker
        api = [asyncio.create_task(sandbox.run(held(tmp_path, f"a{i}", "org-a"))) for i in range(6)]
        release(tmp_path, "b", "a0")  # these end as soon as they start
        # Made before any of a's calls can end: b waits for a worker like a's queued calls.
        other = asyncio.create_task(sandbox.run(held(tmp_path, "b", "org-b")))

        release(tmp_path, running[0])
        order = await started(tmp_path, 4)
        release(tmp_path, *(f"a{i}" for i in range(6)), *(f"s{i}" for i in range(10)))
        b = await other
        results: list[SandboxResult] = [*await asyncio.gather(*api), *await step]

    assert order[2:4] == ["b", "a0"]
    assert b.ok and b.value == "b"
    assert [r.value for r in results] == [f"a{i}" for i in range(6)] + [f"s{i}" for i in range(10)]
    assert len(await started(tmp_path, 17)) == 17  # every call ran once


async def test_a_call_over_the_queue_bound_fails_at_once(tmp_path: Path) -> None:
    settings = Settings(
        tool_sandbox=SandboxKind.PROCESS, tool_workers=1, tool_queue_limit=2, tool_timeout_seconds=LIMITS.timeout
    )
    async with build_sandbox(settings) as sandbox:
        holder = asyncio.create_task(sandbox.run(held(tmp_path, "a0", "org-a")))
        await started(tmp_path, 1)
        # Tasks start in the order they were made: a1 and a2 wait for the worker, the third
        # caller of org-a (one call, then a batch step of two) is over the bound, and b is not.
        waiting = [asyncio.create_task(sandbox.run(held(tmp_path, f"a{i}", "org-a"))) for i in (1, 2)]
        over = asyncio.create_task(sandbox.run(held(tmp_path, "a3", "org-a")))
        step_over = asyncio.create_task(sandbox.run_many([held(tmp_path, f"s{i}", "org-a") for i in range(2)]))
        other = asyncio.create_task(sandbox.run(held(tmp_path, "b", "org-b")))
        # At once: while every call that got in is still held.
        refused = [await asyncio.wait_for(over, 30), *await asyncio.wait_for(step_over, 30)]
        still_held = [task.done() for task in (holder, *waiting, other)]

        release(tmp_path, "a0", "a1", "a2", "b")
        served = [await task for task in (holder, *waiting, other)]

    busy = (
        "the tool sandbox is busy: 2 callers of this organization already wait for one of its 1 workers; try "
        "again later (the server's NIGHTSHIFT_TOOL_WORKERS and NIGHTSHIFT_TOOL_QUEUE_LIMIT set how many run and wait)"
    )
    assert [(r.ok, r.error) for r in refused] == [(False, busy)] * 3
    assert still_held == [False] * 4
    assert [(r.ok, r.value) for r in served] == [(True, "a0"), (True, "a1"), (True, "a2"), (True, "b")]
    assert sorted(await started(tmp_path, 4)) == ["a0", "a1", "a2", "b"]  # the refused never started
