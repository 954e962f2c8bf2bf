"""One zygote process of one organization, seen from the server: start it, send it calls, close it.

The zygote (``_zygote.py``) runs one call at a time, each in a fresh child; this side sends it
each tool's source once (to compile it for every later call) and then the calls, reads the answer
lines, and ends the process (and its sandbox) when asked. The frames are marshal, not JSON: a
fresh process decodes them with far fewer page faults, and only the server writes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import shutil
import struct
import time

import orjson

from nightshift.tools.launch import Launcher, SandboxLimits, Started
from nightshift.tools.results import SandboxCall, SandboxResult, failure

_STDERR_TAIL_BYTES = 64 * 1024
_STARTUP_TIMEOUT = 30.0
# How much longer than a call's timeout the server waits for its zygote's answer before it
# gives the zygote up (the zygote enforces the timeout itself; this catches a zygote that hangs).
_ANSWER_GRACE = 5.0
# How long a zygote told to stop may take before it is killed.
_EXIT_GRACE = 2.0
# A frame's header, as _zygote.HEADER (which the server does not import: the zygote is a script).
_HEADER = struct.Struct("<cId")
# What precedes an answer from a zygote that exits after it (``=`` from one that goes on).
_RETIRES = b"!"
# How many tool sources a zygote keeps compiled, and their total size; a call of any other tool
# carries its source, and its process compiles it.
_COMPILED_SOURCES = 64
_COMPILED_CHARS = 4_000_000


class StartError(Exception):
    """A zygote did not come up; the message says why."""


class Zygote:
    """One zygote process of one organization, and the pipes to it."""

    def __init__(self, started: Started) -> None:
        self.started = started
        self.process = started.process
        self.org_id = ""  # set when an organization first takes it; never changed after
        self.idle_since = time.monotonic()
        self.calls = 0
        self._compiled: dict[str, int] = {}  # source code -> its number in the zygote
        self._compiled_chars = 0
        self._failed = False
        self._stderr_tail = bytearray()
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self._close_task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return not self._failed and self.process.returncode is None

    @classmethod
    async def start(cls, launcher: Launcher, limits: SandboxLimits) -> Zygote:
        """Start a zygote and wait for its ready line.

        Raises:
            StartError: It could not start or did not report ready.
        """
        try:
            started = await launcher.start(limits)
        except OSError as exc:
            raise StartError(f"{type(exc).__name__}: {exc}") from exc
        zygote = cls(started)
        try:
            assert zygote.process.stdout is not None
            async with asyncio.timeout(_STARTUP_TIMEOUT):
                line = await zygote.process.stdout.readline()
            if line.strip() != b'{"ready": true}':
                await zygote.close(launcher)
                stderr = zygote.stderr_text().strip()
                raise StartError(
                    f"it exited with code {zygote.process.returncode}" + (f": {stderr[-2000:]}" if stderr else "")
                )
        except TimeoutError as exc:
            await zygote.close(launcher)
            raise StartError(f"no ready line within {_STARTUP_TIMEOUT} s") from exc
        except BaseException:
            await zygote.close(launcher)
            raise
        return zygote

    async def call(self, call: SandboxCall, timeout: float) -> SandboxResult:  # noqa: ASYNC109
        """Send one call (whose ``timeout`` the zygote enforces) and wait for its answer; a zygote
        that does not answer in time, or fails, is marked dead."""
        assert self.process.stdin is not None and self.process.stdout is not None
        started = time.perf_counter()
        try:
            frames = self._frames(call, timeout)
        except ValueError as exc:
            return failure(f"arguments are not JSON-serializable: {exc}", started=started)
        self.calls += 1
        try:
            async with asyncio.timeout(timeout + _ANSWER_GRACE):
                with contextlib.suppress(ConnectionError):  # it stopped reading: its answer says why
                    self.process.stdin.write(frames)
                    await self.process.stdin.drain()
                line = await self.process.stdout.readline()
        except TimeoutError:
            self._failed = True
            return failure(f"timed out after {timeout} s (the sandbox did not answer)", started=started)
        except ValueError:  # a line over the limit
            line = b""
        except BaseException:  # cancelled: its state is unknown, so it must not be reused
            self._failed = True
            raise
        if not line.endswith(b"\n"):
            self._failed = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.process.wait()
            return failure(
                f"the tool sandbox died (exit code {self.process.returncode})",
                started=started,
                stderr=self.stderr_text(),
            )
        if line.startswith(_RETIRES):  # it exits after this answer: the call is done, the zygote is not
            self._failed = True
        return decode(line[1:], started)

    def _frames(self, call: SandboxCall, timeout: float) -> bytes:
        """The call's frame, after its source's when the zygote is to compile it first.

        Raises:
            ValueError: The arguments hold a value marshal cannot (nothing JSON gives).
        """
        source = call.source_code
        number = self._compiled.get(source)
        first: int | None = None  # the number of a source the zygote is to compile now
        if (
            number is None
            and len(self._compiled) < _COMPILED_SOURCES
            and self._compiled_chars + len(source) <= _COMPILED_CHARS
        ):
            number = first = len(self._compiled)
        body = marshal.dumps((dict(call.env), source if number is None else number, call.function_name, call.arguments))
        frames = _HEADER.pack(b"C", len(body), timeout) + body
        if first is not None:
            self._compiled[source] = first
            self._compiled_chars += len(source)
            code = marshal.dumps((first, source))
            frames = _HEADER.pack(b"S", len(code), 0.0) + code + frames
        return frames

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


def decode(line: bytes, started: float) -> SandboxResult:
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
        return failure("the tool's answer could not be read", started=started)
    return SandboxResult(
        ok=ok,
        value=answer.get("value") if ok else None,
        error=None if ok else (error or "unknown error"),
        stdout=stdout,
        stderr=stderr,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
