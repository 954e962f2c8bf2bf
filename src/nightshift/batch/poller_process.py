"""``serve``'s poller in a child process: the API process's event loop then serves requests only.

A stage of a large batch (building ten thousand requests, applying their results) holds the event
loop of the process it runs in for seconds; a thread does not help (the interpreter's lock is
shared). So ``serve`` starts ``nightshift poll`` as its child (``PollerProcess``), the same poller
``nightshift poll`` runs apart, and leases keep the two processes apart as they keep several
servers apart.

The parent owns the child's life:

* it starts it with the parent's environment (the same settings), ``--parent`` (the child dies
  with it: a crash of ``serve`` stops its poller as it did when the poller ran inside) and
  ``--metrics-file`` (the child writes its own figures there after each pass, which the parent's
  ``GET /metrics`` adds to its own: see ``Metrics.exposition``);
* ``create_run`` hands it a new run (``POST /v1/messages/batches``) through a socket pair, one
  length-prefixed JSON message each way: the child writes the run and its first step in its own
  transaction (loading ten thousand agents and writing their inputs holds an event loop for
  stretches of 0.1-0.2 s, which the API's would spend not answering) and answers with the run's
  id or the refusal to raise (see ``services.runs.create_handed_off``); an answer comes back
  whatever happens: a child that dies first fails the call with ``ChannelClosed``, and so does
  a call while the child restarts;
* ``wake`` has it poll at once (SIGUSR1): a new run's first step is due;
* a child that exits by itself is started again after ``RESTART_DELAY``;
* at shutdown it sends the child SIGTERM, on which the child drains as ``serve`` does (claims
  nothing more, finishes its stage for the grace period at most, gives its leases back), and
  waits for it; one that outlasts that is killed.

The child's side is ``watch_parent``, ``write_figures`` and ``answer_runs``, used by the ``poll``
command.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import logging
import os
import signal
import socket
import struct
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from nightshift.metrics import Metrics

log = logging.getLogger(__name__)

# A child poller that exits by itself (it should not) is started again this long after.
RESTART_DELAY = 5.0
# After the grace period, how long the child may take to close its sandbox and database.
EXIT_MARGIN = 10.0
# The child's niceness (its tool sandboxes inherit it): batch work yields the CPU to the API's answers.
NICENESS = 10
# Linux's prctl(PR_SET_PDEATHSIG, signal): the kernel sends ``signal`` when the parent dies.
_PR_SET_PDEATHSIG = 1
# A message on the run channel: its length (4 bytes, big-endian), then that much JSON.
_LENGTH = struct.Struct("!I")


class ChannelClosed(Exception):
    """The child poller is not there to take a run (starting again, or it died before answering)."""

    def __init__(self, message: str = "the poller process is not running") -> None:
        super().__init__(message)


async def _send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    data = orjson.dumps(message)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message; ``asyncio.IncompleteReadError`` when the other end has closed."""
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    message: dict[str, Any] = orjson.loads(await reader.readexactly(length))
    return message


class RunChannel:
    """The parent's end of the socket its child takes new runs through: ``ask`` sends one and
    waits for its answer; the answers come back in any order, each with its message's number."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._numbers = itertools.count()
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reading = asyncio.create_task(self._read(reader), name="run-channel")

    @classmethod
    async def open(cls, sock: socket.socket) -> RunChannel:
        return cls(*await asyncio.open_connection(sock=sock))

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message``; its answer. Raises ``ChannelClosed`` when the child is gone first."""
        if self._reading.done():
            raise ChannelClosed()
        number = next(self._numbers)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        try:
            await _send(self._writer, {"number": number, **message})
        except OSError as exc:
            self._waiting.pop(number, None)
            raise ChannelClosed() from exc
        return await answer

    async def close(self) -> None:
        self._writer.close()
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                answer = await _receive(reader)
                waiting = self._waiting.pop(answer.pop("number"), None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(ChannelClosed("the poller process ended before it answered"))
            self._waiting.clear()


async def answer_runs(fd: int, handle: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> None:
    """The child's end of the run channel (socket ``fd``): each message is answered with what
    ``handle`` returns for it (``{"failed": <the exception's type>}`` when it raises: logged
    here), several at a time. Returns when the parent closes its end."""
    reader, writer = await asyncio.open_connection(sock=socket.socket(fileno=fd))
    answering: set[asyncio.Task[None]] = set()

    async def answer(message: dict[str, Any]) -> None:
        number = message.pop("number")
        try:
            reply = await handle(message)
        except Exception as exc:  # the parent must get an answer: it waits for one
            log.exception("a run handed over by serve failed")
            reply = {"failed": type(exc).__name__}
        with contextlib.suppress(OSError):
            await _send(writer, {"number": number, **reply})

    try:
        while True:
            try:
                message = await _receive(reader)
            except (asyncio.IncompleteReadError, OSError):
                return
            task = asyncio.create_task(answer(message))
            answering.add(task)
            task.add_done_callback(answering.discard)
    finally:
        if answering:
            await asyncio.wait(answering)
        writer.close()


class PollerProcess:
    """``nightshift poll`` as a child of this process, started by ``start`` and stopped by ``stop``."""

    def __init__(self, *, grace: float) -> None:
        self.grace = grace
        self._folder = Path(tempfile.mkdtemp(prefix="nightshift-poller-"))
        self.metrics_file = self._folder / "metrics.prom"
        self._process: asyncio.subprocess.Process | None = None
        self._channel: RunChannel | None = None
        self._stopping = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the child, and watch over it (started again if it exits before ``stop``)."""
        self._process = await self._spawn()
        self._supervisor = asyncio.create_task(self._supervise(), name="poller-process")

    async def create_run(self, message: dict[str, Any]) -> dict[str, Any]:
        """Have the child create a run (see ``services.runs.create_handed_off``); its answer.
        Raises ``ChannelClosed`` when the child is not running or ends before it answers."""
        if self._channel is None:
            raise ChannelClosed()
        return await self._channel.ask(message)

    def wake(self) -> None:
        """Have the child poll now rather than at the end of its interval (SIGUSR1): new work is due."""
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGUSR1)

    def figures(self) -> list[str]:
        """The child's last figures (Prometheus text), for ``GET /metrics``; none before its first pass."""
        try:
            return [self.metrics_file.read_text()]
        except OSError:
            return []

    async def stop(self) -> int | None:
        """SIGTERM the child and wait for it to drain (killed if it takes longer than its grace
        period and ``EXIT_MARGIN``). Returns its exit code."""
        self._stopping.set()
        if self._supervisor is not None:
            await self._supervisor
        code = None
        process = self._process
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(self.grace + EXIT_MARGIN):
                    code = await process.wait()
            except TimeoutError:
                log.warning("the poller process %d did not exit in time; killing it", process.pid)
                process.kill()
                code = await process.wait()
        elif process is not None:
            code = process.returncode
        await self._close_channel()
        self.metrics_file.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._folder.rmdir()
        return code

    async def _close_channel(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _spawn(self) -> asyncio.subprocess.Process:
        await self._close_channel()
        ours, childs = socket.socketpair()
        # SIGUSR1 would end a child that has not yet set its handler (the default action): the
        # child inherits it ignored, until its poller listens (a wake before then is not needed:
        # its first pass comes at once).
        previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "nightshift",
                "poll",
                "--parent",
                str(os.getpid()),
                "--metrics-file",
                str(self.metrics_file),
                "--runs-fd",
                str(childs.fileno()),
                pass_fds=(childs.fileno(),),
            )
        finally:
            signal.signal(signal.SIGUSR1, previous)
            childs.close()
        self._channel = await RunChannel.open(ours)
        os.setpriority(os.PRIO_PROCESS, process.pid, NICENESS)
        log.info("started the poller process %d", process.pid)
        return process

    async def _supervise(self) -> None:
        """Until ``stop``: start the child again when it exits (after ``RESTART_DELAY``)."""
        while self._process is not None:
            stopping = asyncio.create_task(self._stopping.wait())
            exited = asyncio.create_task(self._process.wait())
            await asyncio.wait({stopping, exited}, return_when=asyncio.FIRST_COMPLETED)
            if self._stopping.is_set():
                exited.cancel()
                return
            stopping.cancel()
            log.error(
                "the poller process %d exited with %s; starting another in %s s",
                self._process.pid,
                self._process.returncode,
                RESTART_DELAY,
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESTART_DELAY):
                    await self._stopping.wait()
            if self._stopping.is_set():
                return
            self._process = await self._spawn()


def die_with_parent(parent: int) -> None:
    """Make this process (a child poller) end when ``parent`` does, as a poller inside it would.

    On Linux the kernel sends SIGKILL when the parent dies (``prctl``); ``watch_parent`` covers the
    other systems, and a parent that died before this call.
    """
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # the parent is gone already: nothing to serve


async def watch_parent(parent: int, *, every: float = 1.0) -> None:
    """Return when this process's parent is no longer ``parent`` (it died: the child is adopted)."""
    while os.getppid() == parent:  # noqa: ASYNC110 (no event tells a process its parent died)
        await asyncio.sleep(every)


def write_figures(metrics: Metrics, path: Path) -> None:
    """Write this process's own figures to ``path`` at once (a reader never sees half a file)."""
    partial = path.with_suffix(".partial")
    partial.write_bytes(metrics.process_figures())
    partial.replace(path)
