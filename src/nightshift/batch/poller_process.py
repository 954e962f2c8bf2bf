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
* a child that exits by itself is started again after ``RESTART_DELAY``;
* at shutdown it sends the child SIGTERM, on which the child drains as ``serve`` does (claims
  nothing more, finishes its stage for the grace period at most, gives its leases back), and
  waits for it; one that outlasts that is killed.

New runs reach the child through the database (``batch/run_queue.py``), as they reach the
poller of any other server. The child's side is ``watch_parent`` and ``write_figures``, used by the
``poll`` command.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

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


class PollerProcess:
    """``nightshift poll`` as a child of this process, started by ``start`` and stopped by ``stop``."""

    def __init__(self, *, grace: float) -> None:
        self.grace = grace
        self._folder = Path(tempfile.mkdtemp(prefix="nightshift-poller-"))
        self.metrics_file = self._folder / "metrics.prom"
        self._process: asyncio.subprocess.Process | None = None
        self._stopping = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the child, and watch over it (started again if it exits before ``stop``)."""
        self._process = await self._spawn()
        self._supervisor = asyncio.create_task(self._supervise(), name="poller-process")

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
        self.metrics_file.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._folder.rmdir()
        return code

    async def _spawn(self) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nightshift",
            "poll",
            "--parent",
            str(os.getpid()),
            "--metrics-file",
            str(self.metrics_file),
        )
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
