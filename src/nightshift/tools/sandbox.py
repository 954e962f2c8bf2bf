"""The sandbox that runs custom tool code: the :class:`Sandbox` seam and its pool of zygotes.

:class:`ToolSandbox` keeps warm zygote processes (``_zygote.py``), each serving ONE organization
and started by a :class:`~nightshift.tools.launch.Launcher` (inside bubblewrap by default). A
zygote runs one call at a time, each in a fresh child process that dies with the call, so
nothing a tool does reaches the next call, and no organization's call runs where another's did.

The pool holds at most ``workers`` zygotes, which is also how many calls run at once. A call
takes an idle zygote of its organization, or else the spare (a zygote started ahead, bound to no
organization until then, so an organization's first call does not wait for one to start), or
starts one; when the pool is full, the zygote of another organization that has been idle longest
makes room::

    (none) --start--> spare --first call of an org--+
    (none) --start----------------------------------+--> busy[org] <--call--> idle[org]
                                                          |                      |
                         died / pool closed --> killed <--+--another org needs the room

Everything that waits on a zygote is a coroutine; nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from sqlalchemy.engine import make_url

from nightshift.config import SandboxKind, Settings
from nightshift.errors import ToolError
from nightshift.tools.launch import BubblewrapLauncher, Launcher, ProcessLauncher, SandboxLimits
from nightshift.tools.results import SandboxCall, SandboxResult, failure
from nightshift.tools.zygotes import StartError, Zygote

log = logging.getLogger(__name__)


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

    def __init__(self, launcher: Launcher, *, workers: int = 2, limits: SandboxLimits | None = None) -> None:
        """Configure the pool; no process starts here.

        Args:
            launcher: How zygotes are started (bubblewrap, or plain processes).
            workers: How many zygotes the pool holds, and so how many calls run at once.
            limits: What one call may use (the default timeout among them).
        """
        limits = limits or SandboxLimits()
        if workers < 1 or limits.timeout <= 0 or limits.memory_mb < 0 or limits.processes < 1:
            raise ValueError("ToolSandbox needs workers >= 1, timeout > 0, memory_mb >= 0 and processes >= 1")
        self.launcher = launcher
        self.limits = limits
        self._capacity = workers
        self._turns = asyncio.Semaphore(workers)
        self._idle: dict[str, list[Zygote]] = {}
        self._live: set[Zygote] = set()
        self._count = 0  # zygotes alive or starting, the spare included
        self._spare: asyncio.Task[Zygote] | None = None
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
        """Check that zygotes can start here, say so in the log, and start the spare in the background."""
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
        self._refill()

    async def run(self, call: SandboxCall, *, timeout: float | None = None) -> SandboxResult:  # noqa: ASYNC109
        """Run one call on a zygote of its organization. See :class:`Sandbox` for the contract."""
        self._check_open()
        started = time.perf_counter()
        if self._missing is not None:
            return failure(f"custom tools cannot run on this server: {self._missing}", started=started)
        limit = self.limits.timeout if timeout is None else timeout
        async with self._turns:
            try:
                zygote = await self._checkout(call.organization_id)
            except StartError as exc:
                return failure(f"the tool sandbox could not start: {exc}", started=started)
            try:
                result = await zygote.call(call, limit)
            finally:
                self._checkin(zygote)
        return result

    async def run_many(
        self,
        calls: Sequence[SandboxCall],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> list[SandboxResult]:
        """Run many calls across the pool; results in input order."""
        self._check_open()
        results: list[SandboxResult | None] = [None] * len(calls)
        pending = iter(enumerate(calls))

        # One lane per zygote pulls the next call as soon as its previous one is done, so the pool
        # stays busy without a task per call.
        async def lane() -> None:
            for index, call in pending:
                results[index] = await self.run(call, timeout=timeout)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self._capacity, len(calls))):
                group.create_task(lane())
        return [result for result in results if result is not None]

    async def aclose(self) -> None:
        """Kill every zygote (and everything in its sandbox), wait for them, remove their files."""
        if self._closed:
            return
        self._closed = True
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
    return ToolSandbox(launcher, workers=settings.tool_workers, limits=limits)
