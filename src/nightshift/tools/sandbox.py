"""The sandbox that runs custom tool code: the :class:`Sandbox` seam and its process-pool implementation.

:class:`ProcessSandbox` keeps a few WARM worker processes (``_worker.py`` run as a script with
``python -I``) and talks to each over newline-delimited JSON on its stdin/stdout, one call at a
time. Each worker starts from a minimal environment built from scratch (no server secrets), in its
own temporary home directory, process group and address-space limit.

A worker slot's life::

    empty --spawn--> starting --ready line--> idle <--call--> busy
      ^                 |                                      |
      |            start failed                timed out / died / recycled
      +-----------------+--------------------------------------+   (killed; a fresh worker is
                                                                    spawned in the background)

Everything that waits on a worker is a coroutine; nothing blocks the event loop (temporary
directories are made and removed in a thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from nightshift.errors import ToolError

_WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
# The longest response line accepted from a worker; a tool returning more is failed and its worker
# replaced (the model could not use such a result anyway).
_LINE_LIMIT = 64 * 1024 * 1024
_STDERR_TAIL_BYTES = 64 * 1024
_STARTUP_TIMEOUT = 30.0
# How long to wait for a killed worker's pipes to close. Only a tool that escaped the worker's
# process group (setsid in a child) can make this run out.
_REAP_TIMEOUT = 5.0
_WORKER_PATH_ENV = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxCall:
    """One call of a tool function defined in ``source_code``, with JSON-serializable arguments."""

    source_code: str
    function_name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxResult:
    """What a call produced.

    Attributes:
        ok: True when the function returned; False when it raised, timed out or killed its worker.
        value: The JSON-decoded return value when ``ok`` (values JSON cannot hold come back as their
            ``str()``); None otherwise.
        error: ``"TypeError: ..."`` for an exception in the tool, ``"timed out after 2.0 s"``,
            ``"worker died (exit code -9)"`` and the like when not ``ok``; None when ``ok``.
        stdout: What the tool printed.
        stderr: What the tool wrote to ``sys.stderr`` (for a dead worker: the worker's last stderr).
        duration_ms: Time from sending the call to a worker to its answer (queueing excluded).
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
          memory exhaustion come back as ``SandboxResult(ok=False, error=...)``. It raises
          :class:`~nightshift.errors.ToolError` only when used after ``aclose``.
        * The tool sees none of the server's environment variables, files or memory.
        * ``timeout`` (seconds) overrides the sandbox's default for the calls it is given. It is a
          parameter rather than the caller's ``asyncio.timeout`` because running out must kill
          the worker and still produce a result the model can see.
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


class ProcessSandbox:
    """A :class:`Sandbox` backed by a pool of warm worker processes.

    Use it as ``async with ProcessSandbox(...) as sandbox:``, or call :meth:`start` (optional:
    workers otherwise start on first use) and :meth:`aclose`.
    """

    def __init__(
        self,
        *,
        workers: int = 2,
        timeout: float = 10.0,
        memory_limit_mb: int = 512,
        max_calls_per_worker: int = 1000,
    ) -> None:
        """Configure the pool; no process starts here.

        Args:
            workers: How many calls may run at once (one worker process each).
            timeout: Default per-call timeout in seconds.
            memory_limit_mb: Address-space limit of each worker (``RLIMIT_AS``); 0 for none.
            max_calls_per_worker: A worker is replaced after this many calls, so state a tool
                leaks (imported modules, globals of its modules) does not build up forever.
        """
        if workers < 1 or timeout <= 0 or memory_limit_mb < 0 or max_calls_per_worker < 1:
            raise ValueError(
                "ProcessSandbox needs workers >= 1, timeout > 0, memory_limit_mb >= 0 and max_calls_per_worker >= 1"
            )
        self._workers = workers
        self._timeout = timeout
        self._memory_limit_mb = memory_limit_mb
        self._max_calls_per_worker = max_calls_per_worker
        self._slots = [_Slot() for _ in range(workers)]
        self._idle: asyncio.Queue[_Slot] = asyncio.Queue()
        for slot in self._slots:
            self._idle.put_nowait(slot)
        self._live: set[_Worker] = set()
        self._reaping: set[asyncio.Task[None]] = set()
        self._closed = False

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.aclose()  # __aexit__ will not run: do not leave the workers that did start
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start every worker now rather than on first use.

        Raises:
            ToolError: A worker could not start (the message says why).
        """
        self._check_open()
        try:
            await asyncio.gather(*(self._ready_worker(slot) for slot in self._slots))
        except _WorkerStartError as exc:
            raise ToolError(f"the tool sandbox could not start a worker: {exc}") from exc

    async def run(self, call: SandboxCall, *, timeout: float | None = None) -> SandboxResult:  # noqa: ASYNC109
        """Run one call on the next free worker. See :class:`Sandbox` for the contract."""
        self._check_open()
        limit = self._timeout if timeout is None else timeout
        try:
            payload = json.dumps(
                {
                    "source_code": call.source_code,
                    "function_name": call.function_name,
                    "arguments": call.arguments,
                }
            ).encode("utf-8")
        except (TypeError, ValueError) as exc:
            return _failure(f"arguments are not JSON-serializable: {exc}", started=time.perf_counter())
        slot = await self._idle.get()
        try:
            return await self._run_in(slot, payload, limit)
        finally:
            self._idle.put_nowait(slot)

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

        # One lane per worker pulls the next call as soon as its previous one is done, so the pool
        # stays busy without a task per call.
        async def lane() -> None:
            for index, call in pending:
                results[index] = await self.run(call, timeout=timeout)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self._workers, len(calls))):
                group.create_task(lane())
        return [result for result in results if result is not None]

    async def aclose(self) -> None:
        """Kill every worker (and anything they started), wait for them, remove their files."""
        if self._closed:
            return
        self._closed = True
        # Workers still starting are awaited, not cancelled: callers waiting on them then get a
        # "closed" failure instead of a CancelledError they did not ask for.
        starting = [slot.starting for slot in self._slots if slot.starting is not None]
        started = await asyncio.gather(*starting, return_exceptions=True)
        workers = [*self._live, *(worker for worker in started if isinstance(worker, _Worker))]
        for slot in self._slots:
            slot.worker = None
            slot.starting = None
        self._live.clear()
        await asyncio.gather(*(worker.close() for worker in workers))
        while self._reaping:
            await asyncio.gather(*self._reaping)

    def _check_open(self) -> None:
        if self._closed:
            raise ToolError("the tool sandbox is closed")

    async def _run_in(self, slot: _Slot, payload: bytes, limit: float) -> SandboxResult:
        started = time.perf_counter()
        if self._closed:
            return _failure("the tool sandbox was closed before the tool ran", started=started)
        try:
            worker = await self._ready_worker(slot)
            if worker.process.returncode is not None:
                # It died while idle (the OOM killer, say): not this call's fault, so use a new one.
                self._replace(slot, worker)
                worker = await self._ready_worker(slot)
        except _WorkerStartError as exc:
            return _failure(f"sandbox worker failed to start: {exc}", started=started)
        try:
            result = await worker.call(payload, limit)
        finally:
            if not worker.alive or worker.calls >= self._max_calls_per_worker:
                self._replace(slot, worker)
        if self._closed and not worker.alive:
            return _failure("the tool sandbox was closed while the tool ran", started=started)
        return result

    async def _ready_worker(self, slot: _Slot) -> _Worker:
        if slot.worker is not None:
            return slot.worker
        if slot.starting is None:
            slot.starting = self._spawn()
        task = slot.starting
        try:
            # Shielded: a caller that gives up must not kill a worker the next caller can use.
            worker = await asyncio.shield(task)
        except _WorkerStartError:
            if slot.starting is task:
                slot.starting = None
            raise
        if slot.starting is task:
            slot.starting = None
        if self._closed:
            await worker.close()
            raise _WorkerStartError("the tool sandbox is closed")
        if slot.worker is None:
            slot.worker = worker
            self._live.add(worker)
        return slot.worker

    def _spawn(self) -> asyncio.Task[_Worker]:
        return asyncio.create_task(_Worker.spawn(memory_limit_mb=self._memory_limit_mb))

    def _replace(self, slot: _Slot, worker: _Worker) -> None:
        """Retire ``worker`` in the background and start its successor right away."""
        slot.worker = None
        self._live.discard(worker)
        reap = worker.close()
        self._reaping.add(reap)
        reap.add_done_callback(self._reaping.discard)
        if not self._closed and slot.starting is None:
            slot.starting = self._spawn()


class _Slot:
    """A place for one worker in the pool; only the caller holding the slot changes it."""

    __slots__ = ("starting", "worker")

    def __init__(self) -> None:
        self.worker: _Worker | None = None
        self.starting: asyncio.Task[_Worker] | None = None


class _WorkerStartError(Exception):
    """A worker process did not come up; the message says why."""


class _Worker:
    """One worker process, the pipes to it and its temporary home directory."""

    def __init__(self, process: asyncio.subprocess.Process, home: str) -> None:
        self.process = process
        self.home = home
        self.calls = 0
        self.alive = True
        self._next_id = 0
        self._stderr_tail = bytearray()
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self._close_task: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(cls, *, memory_limit_mb: int) -> _Worker:
        """Start a worker and wait for its ready line.

        Raises:
            _WorkerStartError: The process could not start or did not report ready.
        """
        home = await asyncio.to_thread(tempfile.mkdtemp, prefix="nightshift-tool-")
        # Built from scratch, never copied from os.environ: the server's secrets stay out.
        env = {"PATH": _WORKER_PATH_ENV, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                str(_WORKER_SCRIPT),
                "--memory-limit-mb",
                str(memory_limit_mb),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=home,
                env=env,
                # Its own process group, so killing it also kills whatever the tool started.
                start_new_session=True,
                limit=_LINE_LIMIT,
            )
        except OSError as exc:
            await asyncio.to_thread(shutil.rmtree, home, ignore_errors=True)
            raise _WorkerStartError(f"{type(exc).__name__}: {exc}") from exc
        worker = cls(process, home)
        try:
            assert process.stdout is not None
            async with asyncio.timeout(_STARTUP_TIMEOUT):
                line = await process.stdout.readline()
            if json.loads(line or b"null") != {"ready": True}:
                code = await worker._wait_exit()
                stderr = worker._stderr_text().strip()
                raise _WorkerStartError(f"worker exited with code {code}" + (f": {stderr}" if stderr else ""))
        except TimeoutError as exc:
            await worker.close()
            raise _WorkerStartError(f"no ready line within {_STARTUP_TIMEOUT} s") from exc
        except ValueError as exc:
            await worker.close()
            raise _WorkerStartError(f"bad ready line: {exc}") from exc
        except BaseException:
            await worker.close()
            raise
        return worker

    async def call(self, payload: bytes, limit: float) -> SandboxResult:
        """Send one call and wait for its answer; a worker that failed is left dead (``alive`` False)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.calls += 1
        self._next_id += 1
        request_id = self._next_id
        self._stderr_tail.clear()
        started = time.perf_counter()
        try:
            async with asyncio.timeout(limit):
                self.process.stdin.write(b'{"id": %d, "call": %b}\n' % (request_id, payload))
                await self.process.stdin.drain()
                line = await self.process.stdout.readline()
        except TimeoutError:
            self.kill()
            await self._wait_exit()
            return _failure(f"timed out after {float(limit)} s", started=started)
        except ConnectionError:  # the worker was gone before it read the call
            line = b""
        except ValueError:  # the line was longer than _LINE_LIMIT
            self.kill()
            await self._wait_exit()
            return _failure(f"the tool's answer is longer than {_LINE_LIMIT} bytes", started=started)
        except BaseException:  # cancelled: the worker's state is unknown, so it must not be reused
            self.kill()
            raise
        if not line.endswith(b"\n"):
            code = await self._wait_exit()
            return _failure(f"worker died (exit code {code})", started=started, stderr=self._stderr_text())
        return self._decode(line, request_id, started)

    def kill(self) -> None:
        """SIGKILL the worker's process group (the worker and anything its tools started)."""
        self.alive = False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def close(self) -> asyncio.Task[None]:
        """Kill the worker and clean up after it; every caller shares one cleanup task."""
        if self._close_task is None:
            self._close_task = asyncio.create_task(self._close())
        return self._close_task

    async def _close(self) -> None:
        self.kill()
        await self._wait_exit()
        if not self._stderr_task.done():  # only when a process outside the group holds the pipe
            self._stderr_task.cancel()
        await asyncio.gather(self._stderr_task, return_exceptions=True)
        await asyncio.to_thread(shutil.rmtree, self.home, ignore_errors=True)

    async def _wait_exit(self) -> int | None:
        """Wait for the worker to exit (killing it if it lingers) and for its pipes to close."""
        self.alive = False
        try:
            async with asyncio.timeout(1.0):
                code = await self.process.wait()
        except TimeoutError:
            return await self._kill_and_wait()
        # The pipes are closed once wait() returns; let the drain task take the last stderr bytes.
        await asyncio.wait([self._stderr_task], timeout=1.0)
        return code

    async def _kill_and_wait(self) -> int | None:
        self.kill()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_REAP_TIMEOUT):
                await self.process.wait()
        return self.process.returncode

    async def _drain_stderr(self) -> None:
        # Keeps only the tail: enough to explain a crash, bounded however much a tool writes.
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.read(65536):
            self._stderr_tail += chunk
            del self._stderr_tail[:-_STDERR_TAIL_BYTES]

    def _stderr_text(self) -> str:
        return self._stderr_tail.decode("utf-8", "replace")

    def _decode(self, line: bytes, request_id: int, started: float) -> SandboxResult:
        try:
            response = json.loads(line)
            ok, error = response["ok"], response["error"]
            stdout, stderr = response["stdout"], response["stderr"]
            if (
                response["id"] != request_id
                or not isinstance(ok, bool)
                or not isinstance(stdout, str)
                or not isinstance(stderr, str)
                or not (error is None or isinstance(error, str))
            ):
                raise ValueError("unexpected fields")
        except (ValueError, KeyError, TypeError):
            # Only a tool that wrote to the protocol descriptor itself gets here; its worker
            # cannot be trusted to be in step any more.
            self.kill()
            return _failure("worker sent an invalid response", started=started)
        return SandboxResult(
            ok=ok,
            value=response.get("value") if ok else None,
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
