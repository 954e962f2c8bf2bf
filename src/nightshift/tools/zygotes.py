"""One zygote process of one organization, seen from the server: start it, send it calls, close it.

The zygote (``_zygote.py``) runs one call at a time, each in a fresh child; this side sends it
each tool's source once (to compile it for every later call) and then the calls, reads the answer
lines, and ends the process (and its sandbox) when asked. The frames are marshal, not JSON: a
fresh process decodes them with far fewer page faults, and only the server writes them.

An answer is read a chunk at a time, up to a bound (the zygote's own, :data:`ANSWER_BYTES`, which
it enforces on the tool: a longer answer fails that call and the zygote goes on), so a large one
never holds the event loop in one piece. A large answer is decoded on a thread, by a decoder that
hands the interpreter back to the event loop as it goes (see :func:`_decode_large`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import marshal
import math
import shutil
import struct
import time
from typing import Any

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
# The longest answer line the server reads: the zygote's ANSWER_LIMIT (which it enforces on the
# tool), and room for its prefix, the newline and the envelope of a failure. Only a zygote that
# breaks the protocol sends more; it is replaced.
ANSWER_BYTES = 4 * 1024 * 1024 + 64 * 1024
# How much of an answer is taken from the pipe's buffer at a time.
_READ_CHUNK = 256 * 1024
# Answers longer than this are decoded on a thread (see _decode_large); shorter ones, nearly all,
# on the event loop, where orjson decodes them in less than a trip to a thread and back.
_DECODE_ON_LOOP_BYTES = 256 * 1024


class StartError(Exception):
    """A zygote did not come up; the message says why."""


class _BrokenAnswer(Exception):
    """An answer went past :data:`ANSWER_BYTES`, or more than the answer came; the message says which."""


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
                line = await self._read_answer()
        except TimeoutError:
            self._failed = True
            return failure(f"timed out after {timeout} s (the sandbox did not answer)", started=started)
        except _BrokenAnswer as exc:
            self._failed = True  # what follows in the pipe is the rest of that answer: a fresh zygote reads on
            return failure(str(exc), started=started, stderr=self.stderr_text())
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
        if len(line) > _DECODE_ON_LOOP_BYTES:
            return await asyncio.to_thread(decode, line[1:], started, large=True)
        return decode(line[1:], started)

    async def _read_answer(self) -> bytes:
        """The next answer line, newline included; without it when the zygote ended first.

        Raises:
            _BrokenAnswer: It is longer than :data:`ANSWER_BYTES`, or is not one line.
        """
        assert self.process.stdout is not None
        reader = self.process.stdout
        chunk = await reader.read(_READ_CHUNK)
        if chunk.endswith(b"\n") and chunk.find(b"\n", 0, -1) < 0:  # nearly every answer: whole, in one read
            return chunk
        chunks, size = [chunk], len(chunk)
        while chunk and not chunk.endswith(b"\n"):
            chunk = await reader.read(_READ_CHUNK)
            size += len(chunk)
            if size > ANSWER_BYTES:
                raise _BrokenAnswer(f"the tool's answer is longer than {ANSWER_BYTES} bytes")
            chunks.append(chunk)
        line = b"".join(chunks)
        if line.find(b"\n", 0, -1) >= 0:  # the zygote sends one line per call, and nothing more
            raise _BrokenAnswer("the tool sandbox broke its protocol (more than one answer line)")
        return line

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


def decode(line: bytes, started: float, *, large: bool = False) -> SandboxResult:
    """The result an answer line (without its prefix) holds; ``large`` on a thread, see :func:`_decode_large`."""
    try:
        answer = _decode_large(line) if large else orjson.loads(line)
        ok, error = answer["ok"], answer["error"]
        stdout, stderr = answer["stdout"], answer["stderr"]
        if (
            not isinstance(ok, bool)
            or not isinstance(stdout, str)
            or not isinstance(stderr, str)
            or not (error is None or isinstance(error, str))
        ):
            raise ValueError("unexpected fields")
    except (orjson.JSONDecodeError, ValueError, KeyError, TypeError, RecursionError):
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


def _decode_large(line: bytes) -> Any:
    """Decode a large answer as orjson would, so that the event loop keeps running meanwhile.

    A thread alone does not free the loop: orjson and json's C scanner hold the GIL for a whole
    document. The hooks below are Python functions, at which the interpreter lets the waiting event
    loop in every switch interval; they also refuse what orjson refuses (NaN, infinities).
    """
    return json.loads(
        line,
        object_pairs_hook=_object,
        parse_int=_integer,
        parse_float=_finite,
        parse_constant=_refuse_constant,
    )


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


def _integer(text: str) -> int:
    return int(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _refuse_constant(text: str) -> float:
    raise ValueError(f"not JSON: {text}")
