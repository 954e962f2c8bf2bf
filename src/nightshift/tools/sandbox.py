"""The sandbox that runs custom tool code: the :class:`Sandbox` seam and its pool of zygotes.

:class:`ToolSandbox` keeps warm zygote processes (``_zygote.py``), each serving ONE organization
and started by a :class:`~nightshift.tools.launch.Launcher` (inside bubblewrap by default). A
zygote runs one call at a time, each in a fresh child process that dies with the call, so
nothing a tool does reaches the next call, and no organization's call runs where another's did.

The pool holds at most ``workers`` zygotes, which is also how many calls run at once. A call takes
an idle zygote of its organization, or else the spare (a zygote started ahead, bound to no
organization until then, so an organization's first call does not wait for one to start; the first
starts a moment after the pool, off the server's start), or starts one; when the pool is full, the
zygote of another organization that has been idle longest makes room::

    (none) --start--> spare --first call of an org--+
    (none) --start----------------------------------+--> busy[org] <--call--> idle[org]
                                                          |                      |
                         died / pool closed --> killed <--+--another org needs the room

Who runs next (:mod:`nightshift.tools.turns`): the workers are shared among organizations, the
same way for calls from the API (a tool run, the tools of a synchronous message) and for the
batch poller's steps (``run_many``). A lone organization uses every worker; when calls wait, a
worker that frees goes to the organization with the fewest calls running (the longest waiting
among equals), so another organization's call runs as soon as one call ends, never behind the
first one's backlog. ``run_many`` keeps at most one call per lane waiting, so an organization's
own single call is not held behind its batch step either. At most ``queue_limit`` callers of one
organization (``NIGHTSHIFT_TOOL_QUEUE_LIMIT``; a ``run_many`` counts once per organization) wait
at once: the next fails at once with an error saying the sandbox is busy, and one
organization's backlog never makes another's calls fail. Each server process (the API, the
poller) has a pool of its own.

Everything that waits on a zygote is a coroutine; nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from sqlalchemy.engine import make_url

from nightshift.config import DEFAULT_TOOL_QUEUE_LIMIT, SandboxKind, Settings
from nightshift.errors import ToolError
from nightshift.tools.launch import BubblewrapLauncher, Launcher, ProcessLauncher, SandboxLimits
from nightshift.tools.results import SandboxCall, SandboxResult, failure
from nightshift.tools.turns import Closed, Turns
from nightshift.tools.zygotes import StartError, Zygote

log = logging.getLogger(__name__)

CLOSED = "the tool sandbox was closed"
# How long after start() the first spare starts: a server's own start (its imports, migrations,
# the poller's process) has the CPU first, and a process that ends soon after it started (a
# command, a test's app) starts no zygote it never uses. A call that comes sooner starts one.
FIRST_SPARE_DELAY = 2.0


class Sandbox(Protocol):
    """Runs untrusted tool functions away from the server process.

    Contract:
        * ``run`` never raises for anything the tool does: exceptions, timeouts, crashes and
          limits come back as ``SandboxResult(ok=False, error=...)``; so does a sandbox that
          cannot run tools on this machine (the error says what is missing). It raises
          :class:`~nightshift.errors.ToolError` only when used after ``aclose``.
        * A call sees none of the server's environment, files, processes or memory, and nothing
          of another call: not another organization's, not an earlier one of its own.
        * ``timeout`` (seconds) overrides the sandbox's default for the calls it is given.
        * ``run_many`` runs the calls concurrently, as far as the sandbox's capacity allows, and
          returns one result per call, in input order.
        * A sandbox that is busy may refuse a call at once, as a result whose error says so.
        * ``aclose`` ends every process the sandbox started; it is safe to call twice.
    """

    async def run(self, call: SandboxCall, *, timeout: float | None = None) -> SandboxResult:  # noqa: ASYNC109
        """Run one call."""
        ...

    async def run_many(
        self,
        calls: Sequence[SandboxCall],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> list[SandboxResult]:
        """Run many calls; results in input order."""
        ...

    async def aclose(self) -> None:
        """Release every process and file the sandbox holds."""
        ...


class ToolSandbox:
    """A :class:`Sandbox` backed by a pool of per-organization zygotes.

    Use it as ``async with ToolSandbox(launcher) as sandbox:``, or call :meth:`start` and
    :meth:`aclose`.
    """

    def __init__(
        self,
        launcher: Launcher,
        *,
        workers: int = 2,
        limits: SandboxLimits | None = None,
        queue_limit: int = DEFAULT_TOOL_QUEUE_LIMIT,
        first_spare_delay: float = FIRST_SPARE_DELAY,
    ) -> None:
        """Configure the pool; no process starts here.

        Args:
            launcher: How zygotes are started (bubblewrap, or plain processes).
            workers: How many zygotes the pool holds, and so how many calls run at once.
            limits: What one call may use (the default timeout among them).
            queue_limit: How many callers of one organization may wait for a worker at once.
            first_spare_delay: Seconds from :meth:`start` to the start of the first spare.
        """
        limits = limits or SandboxLimits()
        if workers < 1 or limits.timeout <= 0 or limits.memory_mb < 0 or limits.processes < 1 or queue_limit < 1:
            raise ValueError(
                "ToolSandbox needs workers >= 1, timeout > 0, memory_mb >= 0, processes >= 1 and queue_limit >= 1"
            )
        self.launcher = launcher
        self.limits = limits
        self._capacity = workers
        self._turns = Turns(workers, queue_limit=queue_limit)
        self._queue_limit = queue_limit
        self._idle: dict[str, list[Zygote]] = {}
        self._live: set[Zygote] = set()
        self._count = 0  # zygotes alive or starting, the spare included
        self._spare: asyncio.Task[Zygote] | None = None
        self._first_spare_delay = first_spare_delay
        self._first_spare: asyncio.TimerHandle | None = None
        self._reaping: set[asyncio.Task[None]] = set()
        self._missing: str | None = None
        self._closed = False

    @property
    def kind(self) -> SandboxKind:
        """How this sandbox isolates tools."""
        return self.launcher.kind

    @property
    def unavailable(self) -> str | None:
        """Why custom tools cannot run here (checked by :meth:`start`), or None."""
        return self._missing

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Check that zygotes can start here, say so in the log, and start the spare in the background
        (after ``first_spare_delay``)."""
        self._check_open()
        self._missing = self.launcher.missing()
        if self._missing is not None:
            log.error("custom tools will not run: %s", self._missing)
            return
        if self.launcher.kind is SandboxKind.PROCESS:
            log.warning(
                "NIGHTSHIFT_TOOL_SANDBOX=process: custom tools run as plain processes of this server's user, "
                "with no isolation (they can read its files and reach its network); use only with trusted tools"
            )
        self._first_spare = asyncio.get_running_loop().call_later(self._first_spare_delay, self._refill)

    async def run(self, call: SandboxCall, *, timeout: float | None = None) -> SandboxResult:  # noqa: ASYNC109
        """Run one call on a zygote of its organization. See :class:`Sandbox` for the contract."""
        self._check_open()
        turns = self._turns
        started = time.perf_counter()
        if self._missing is not None:
            return failure(f"custom tools cannot run on this server: {self._missing}", started=started)
        org_id = call.organization_id
        if not turns.join(org_id):
            return self._busy(org_id, started)
        try:
            await turns.take(org_id)
        except Closed:
            return failure(CLOSED, started=started)
        finally:
            turns.leave(org_id)
        try:
            return await self._run_on_zygote(call, self.limits.timeout if timeout is None else timeout)
        finally:
            turns.give_back(org_id)

    async def run_many(
        self,
        calls: Sequence[SandboxCall],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> list[SandboxResult]:
        """Run many calls across the pool; results in input order.

        Each organization's calls are one caller, in as many lanes as the pool has workers: a lane
        waits for a turn, runs one call and queues again, so the pool stays busy without a task
        per call and another caller's call is never behind the whole batch.
        """
        self._check_open()
        turns = self._turns
        started = time.perf_counter()
        if self._missing is not None:
            return [failure(f"custom tools cannot run on this server: {self._missing}", started=started)] * len(calls)
        limit = self.limits.timeout if timeout is None else timeout
        results: list[SandboxResult | None] = [None] * len(calls)
        parts: dict[str, _Part] = {}
        for index, call in enumerate(calls):
            parts.setdefault(call.organization_id, _Part(call.organization_id)).pending.append((index, call))

        async def lane(part: _Part) -> None:
            while part.pending:
                try:
                    await turns.take(part.org_id)
                except Closed:
                    break
                if not part.pending:  # another lane took the last call meanwhile
                    turns.give_back(part.org_id)
                    return
                index, call = part.pending.popleft()
                if not part.pending:
                    part.leave(turns)  # its last call has a turn: this caller waits no more
                try:
                    results[index] = await self._run_on_zygote(call, limit)
                finally:
                    turns.give_back(part.org_id)
            for index, _ in part.pending:  # the pool closed while it waited
                results[index] = failure(CLOSED, started=started)
            part.pending.clear()

        joined: list[_Part] = []
        try:
            async with asyncio.TaskGroup() as group:
                for part in parts.values():
                    if not turns.join(part.org_id):
                        busy = self._busy(part.org_id, started)
                        for index, _ in part.pending:
                            results[index] = busy
                        continue
                    joined.append(part)
                    for _ in range(min(self._capacity, len(part.pending))):
                        group.create_task(lane(part))
        finally:
            for part in joined:
                part.leave(turns)
        return [result for result in results if result is not None]

    async def _run_on_zygote(self, call: SandboxCall, timeout: float) -> SandboxResult:  # noqa: ASYNC109
        """Run one call, its turn held, on a zygote of its organization."""
        try:
            zygote = await self._checkout(call.organization_id)
        except StartError as exc:
            return failure(f"the tool sandbox could not start: {exc}", started=time.perf_counter())
        try:
            return await zygote.call(call, timeout)
        finally:
            self._checkin(zygote)

    def _busy(self, org_id: str, started: float) -> SandboxResult:
        log.warning("tool sandbox busy: a call of organization %s was refused", org_id)
        return failure(
            f"the tool sandbox is busy: {self._queue_limit} callers of this organization already wait for one "
            f"of its {self._capacity} workers; try again later (the server's NIGHTSHIFT_TOOL_WORKERS and "
            "NIGHTSHIFT_TOOL_QUEUE_LIMIT set how many run and wait)",
            started=started,
        )

    async def aclose(self) -> None:
        """Kill every zygote (and everything in its sandbox), wait for them, remove their files."""
        if self._closed:
            return
        self._closed = True
        self._turns.close()
        if self._first_spare is not None:
            self._first_spare.cancel()
        if self._spare is not None:
            # Awaited, not cancelled: a zygote that is starting is then closed like the others.
            await asyncio.gather(self._spare, return_exceptions=True)
        zygotes = list(self._live)
        self._idle.clear()
        self._live.clear()
        await asyncio.gather(*(z.close(self.launcher) for z in zygotes))
        while self._reaping:
            await asyncio.gather(*self._reaping)

    def _check_open(self) -> None:
        if self._closed:
            raise ToolError("the tool sandbox is closed")

    async def _checkout(self, org_id: str) -> Zygote:
        """A zygote of ``org_id`` for the caller alone; the caller holds one of the pool's turns."""
        idle = self._idle.get(org_id, [])
        while idle:
            zygote = idle.pop()
            if zygote.alive:
                return zygote
            self._retire(zygote)
        spare = await self._claim_spare()
        if spare is not None:
            zygote = spare
        else:
            if self._count >= self._capacity:
                # Every turn but ours may hold a zygote, so at least one other organization's is idle.
                org, zygotes = min(
                    ((o, zs) for o, zs in self._idle.items() if zs), key=lambda entry: entry[1][0].idle_since
                )
                self._retire(zygotes.pop(0))
                if not zygotes:
                    del self._idle[org]
            zygote = await self._start_zygote()
        zygote.org_id = org_id
        if self._closed:
            self._retire(zygote)
            raise StartError("the tool sandbox was closed")
        self._refill()
        return zygote

    async def _start_zygote(self) -> Zygote:
        """Start a zygote that counts in the pool (bound to no organization yet)."""
        self._count += 1
        try:
            zygote = await Zygote.start(self.launcher, self.limits)
        except BaseException:
            self._count -= 1
            raise
        self._live.add(zygote)
        return zygote

    async def _claim_spare(self) -> Zygote | None:
        """The spare, once started; None when there is none or it failed to start."""
        task, self._spare = self._spare, None
        if task is None:
            return None
        try:
            zygote = await task
        except StartError as exc:
            log.warning("the spare tool sandbox did not start: %s", exc)
            return None
        if not zygote.alive:
            self._retire(zygote)
            return None
        return zygote

    def _refill(self) -> None:
        """Start a spare while the pool has room for one."""
        if self._closed or self._missing is not None or self._spare is not None or self._count >= self._capacity:
            return
        self._spare = asyncio.create_task(self._start_zygote(), name="tool-sandbox-spare")

    def _checkin(self, zygote: Zygote) -> None:
        if zygote.alive and not self._closed:
            zygote.idle_since = time.monotonic()
            self._idle.setdefault(zygote.org_id, []).append(zygote)
        else:
            self._retire(zygote)

    def _retire(self, zygote: Zygote) -> None:
        """Kill a zygote in the background; its room in the pool is free at once."""
        if zygote not in self._live:
            return
        self._live.discard(zygote)
        self._count -= 1
        reap = asyncio.ensure_future(zygote.close(self.launcher))
        self._reaping.add(reap)
        reap.add_done_callback(self._reaping.discard)
        self._refill()


class _Part:
    """One organization's calls of a ``run_many``: one caller of :class:`Turns`, in several lanes."""

    __slots__ = ("left", "org_id", "pending")

    def __init__(self, org_id: str) -> None:
        self.org_id = org_id
        self.pending: deque[tuple[int, SandboxCall]] = deque()
        self.left = False

    def leave(self, turns: Turns) -> None:
        """Stop counting as a caller that waits (once)."""
        if not self.left:
            self.left = True
            turns.leave(self.org_id)


def build_sandbox(settings: Settings) -> ToolSandbox:
    """The sandbox the settings ask for (``NIGHTSHIFT_TOOL_*``); nothing starts here."""
    launcher: Launcher
    if settings.tool_sandbox is SandboxKind.BUBBLEWRAP:
        hidden = [settings.home]
        database = make_url(settings.resolved_database_url)
        if database.get_backend_name() == "sqlite" and database.database:
            hidden.append(Path(database.database).parent)
        launcher = BubblewrapLauncher(
            binary=settings.tool_bwrap,
            network=settings.tool_network,
            hidden=hidden,
            uids=range(settings.tool_uid_base, settings.tool_uid_base + settings.tool_uid_count),
        )
    else:
        launcher = ProcessLauncher()
    limits = SandboxLimits(
        timeout=settings.tool_timeout_seconds,
        memory_mb=settings.tool_memory_limit_mb,
        processes=settings.tool_max_processes,
        open_files=settings.tool_max_open_files,
        file_mb=settings.tool_max_file_mb,
    )
    return ToolSandbox(launcher, workers=settings.tool_workers, limits=limits, queue_limit=settings.tool_queue_limit)
