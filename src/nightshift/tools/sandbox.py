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
import contextlib
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import orjson
from sqlalchemy.engine import make_url

from nightshift.config import Settings
from nightshift.errors import ToolError
from nightshift.tools.launch import (
    BubblewrapLauncher,
    Launcher,
    ProcessLauncher,
    SandboxKind,
    SandboxLimits,
    Started,
)

log = logging.getLogger(__name__)

_STDERR_TAIL_BYTES = 64 * 1024
_STARTUP_TIMEOUT = 30.0
# How much longer than a call's timeout the server waits for its zygote's answer before it
# gives the zygote up (the zygote enforces the timeout itself; this catches a zygote that hangs).
_ANSWER_GRACE = 5.0
# How long a zygote told to stop may take before it is killed.
_EXIT_GRACE = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxCall:
    """One call of a tool function defined in ``source_code``, with JSON-serializable arguments.

    ``env`` is added to the call's environment: the agent's secrets, seen by this call only.
    """

    organization_id: str
    source_code: str
    function_name: str
    arguments: dict[str, Any]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxResult:
    """What a call produced.

    Attributes:
        ok: True when the function returned; False when it raised, timed out, went over a limit,
            or could not run.
        value: The JSON-decoded return value when ``ok`` (values JSON cannot hold come back as their
            ``str()``); None otherwise.
        error: ``"TypeError: ..."`` for an exception in the tool, ``"timed out after 2.0 s"`` and
            the like when not ``ok``; None when ``ok``.
        stdout: What the tool printed.
        stderr: What the tool wrote to ``sys.stderr``.
        duration_ms: Time from sending the call to a zygote to its answer (queueing excluded).
    """

    ok: bool
    value: Any
    error: str | None
    stdout: str
    stderr: str
    duration_ms: float


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
        self._idle: dict[str, list[_Zygote]] = {}
        self._live: set[_Zygote] = set()
        self._count = 0  # zygotes alive or starting, the spare included
        self._spare: asyncio.Task[_Zygote] | None = None
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
            return _failure(f"custom tools cannot run on this server: {self._missing}", started=started)
        limit = self.limits.timeout if timeout is None else timeout
        try:
            payload = orjson.dumps(
                {
                    "timeout": limit,
                    "env": dict(call.env),
                    "call": {
                        "source_code": call.source_code,
                        "function_name": call.function_name,
                        "arguments": call.arguments,
                    },
                }
            )
        except TypeError as exc:
            return _failure(f"arguments are not JSON-serializable: {exc}", started=started)
        async with self._turns:
            try:
                zygote = await self._checkout(call.organization_id)
            except _StartError as exc:
                return _failure(f"the tool sandbox could not start: {exc}", started=started)
            try:
                result = await zygote.call(payload, limit + _ANSWER_GRACE)
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

    async def _checkout(self, org_id: str) -> _Zygote:
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
            raise _StartError("the tool sandbox was closed")
        self._refill()
        return zygote

    async def _start_zygote(self) -> _Zygote:
        """Start a zygote that counts in the pool (bound to no organization yet)."""
        self._count += 1
        try:
            zygote = await _Zygote.start(self.launcher, self.limits)
        except BaseException:
            self._count -= 1
            raise
        self._live.add(zygote)
        return zygote

    async def _claim_spare(self) -> _Zygote | None:
        """The spare, once started; None when there is none or it failed to start."""
        task, self._spare = self._spare, None
        if task is None:
            return None
        try:
            zygote = await task
        except _StartError as exc:
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

    def _checkin(self, zygote: _Zygote) -> None:
        if zygote.alive and not self._closed:
            zygote.idle_since = time.monotonic()
            self._idle.setdefault(zygote.org_id, []).append(zygote)
        else:
            self._retire(zygote)

    def _retire(self, zygote: _Zygote) -> None:
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
        launcher = BubblewrapLauncher(binary=settings.tool_bwrap, network=settings.tool_network, hidden=hidden)
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


class _StartError(Exception):
    """A zygote did not come up; the message says why."""


class _Zygote:
    """One zygote process of one organization, and the pipes to it."""

    def __init__(self, started: Started) -> None:
        self.started = started
        self.process = started.process
        self.org_id = ""  # set when an organization first takes it; never changed after
        self.idle_since = time.monotonic()
        self.calls = 0
        self._failed = False
        self._stderr_tail = bytearray()
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self._close_task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return not self._failed and self.process.returncode is None

    @classmethod
    async def start(cls, launcher: Launcher, limits: SandboxLimits) -> _Zygote:
        """Start a zygote and wait for its ready line.

        Raises:
            _StartError: It could not start or did not report ready.
        """
        try:
            started = await launcher.start(limits)
        except OSError as exc:
            raise _StartError(f"{type(exc).__name__}: {exc}") from exc
        zygote = cls(started)
        try:
            assert zygote.process.stdout is not None
            async with asyncio.timeout(_STARTUP_TIMEOUT):
                line = await zygote.process.stdout.readline()
            if line.strip() != b'{"ready": true}':
                await zygote.close(launcher)
                stderr = zygote.stderr_text().strip()
                raise _StartError(
                    f"it exited with code {zygote.process.returncode}" + (f": {stderr[-2000:]}" if stderr else "")
                )
        except TimeoutError as exc:
            await zygote.close(launcher)
            raise _StartError(f"no ready line within {_STARTUP_TIMEOUT} s") from exc
        except BaseException:
            await zygote.close(launcher)
            raise
        return zygote

    async def call(self, payload: bytes, limit: float) -> SandboxResult:
        """Send one call and wait for its answer; a zygote that failed is marked dead."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.calls += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(limit):
                self.process.stdin.write(payload + b"\n")
                await self.process.stdin.drain()
                line = await self.process.stdout.readline()
        except TimeoutError:
            self._failed = True
            return _failure(f"timed out after {limit - _ANSWER_GRACE} s (the sandbox did not answer)", started=started)
        except (ConnectionError, ValueError):  # gone before it read the call; a line over the limit
            line = b""
        except BaseException:  # cancelled: its state is unknown, so it must not be reused
            self._failed = True
            raise
        if not line.endswith(b"\n"):
            self._failed = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.process.wait()
            return _failure(
                f"the tool sandbox died (exit code {self.process.returncode})",
                started=started,
                stderr=self.stderr_text(),
            )
        return _decode(line, started)

    def close(self, launcher: Launcher) -> asyncio.Task[None]:
        """Kill the zygote and clean up after it; every caller shares one cleanup task."""
        if self._close_task is None:
            self._close_task = asyncio.create_task(self._close(launcher))
        return self._close_task

    async def _close(self, launcher: Launcher) -> None:
        self._failed = True
        # The end of its request stream tells the zygote to end the call it runs and exit, with
        # everything it started; killing it is for a zygote that does not.
        if self.process.stdin is not None:
            self.process.stdin.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_EXIT_GRACE):
                await self.process.wait()
        launcher.kill(self.started)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await self.process.wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await asyncio.shield(self._stderr_task)
        if not self._stderr_task.done():  # only when an escaped process holds the pipe (process mode)
            self._stderr_task.cancel()
        await asyncio.gather(self._stderr_task, return_exceptions=True)
        if self.started.scratch is not None:
            await asyncio.to_thread(shutil.rmtree, self.started.scratch, ignore_errors=True)

    async def _drain_stderr(self) -> None:
        # Keeps only the tail: enough to explain a crash, bounded however much a tool writes.
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.read(65536):
            self._stderr_tail += chunk
            del self._stderr_tail[:-_STDERR_TAIL_BYTES]

    def stderr_text(self) -> str:
        return self._stderr_tail.decode("utf-8", "replace")


def _decode(line: bytes, started: float) -> SandboxResult:
    try:
        answer = orjson.loads(line)
        ok, error = answer["ok"], answer["error"]
        stdout, stderr = answer["stdout"], answer["stderr"]
        if (
            not isinstance(ok, bool)
            or not isinstance(stdout, str)
            or not isinstance(stderr, str)
            or not (error is None or isinstance(error, str))
        ):
            raise ValueError("unexpected fields")
    except (orjson.JSONDecodeError, ValueError, KeyError, TypeError):
        # Only a tool that wrote into its own answer channel gets here: its call fails.
        return _failure("the tool's answer could not be read", started=started)
    return SandboxResult(
        ok=ok,
        value=answer.get("value") if ok else None,
        error=None if ok else (error or "unknown error"),
        stdout=stdout,
        stderr=stderr,
        duration_ms=(time.perf_counter() - started) * 1000,
    )


def _failure(error: str, *, started: float, stdout: str = "", stderr: str = "") -> SandboxResult:
    return SandboxResult(
        ok=False,
        value=None,
        error=error,
        stdout=stdout,
        stderr=stderr,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
