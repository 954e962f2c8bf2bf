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

``serve`` forks its first child early (``fork_early``), before it opens anything, starts a thread
or an event loop, once it has imported the server: the child shares those modules with it instead
of importing them again, and waits for ``start`` to tell it to begin (after the migrations) and
where to write its figures. A child started again after an exit, and the child of a process that
did not fork one (or could not: not Linux, a thread running), is ``nightshift poll`` started anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

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
# Linux's prctl(PR_SET_NAME, name): the process's name (ps -o comm, top), 15 bytes at most.
_PR_SET_NAME = 15
# How long ``fork_early`` lets the threads of what ran before it (a database check) end.
_THREADS_END = 2.0
# The folders the children's figures go to, in the temporary folder: this, the server's pid, "-".
FOLDER_PREFIX = "nightshift-poller-"


class _Child(Protocol):
    """What ``PollerProcess`` uses of its child: an ``asyncio.subprocess.Process``, or a ``_Forked``."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


class _Forked:
    """A poller child forked by ``fork_early``, seen from its parent: told to begin by ``begin``,
    and waited for through a pidfd (the event loop hears its exit, no thread waits for it)."""

    def __init__(self, pid: int, pidfd: int, go: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._go = go
        self._exited: asyncio.Future[int] | None = None

    def begin(self, metrics_file: Path) -> None:
        """Tell the child to start polling, writing its figures to ``metrics_file``."""
        try:
            os.write(self._go, os.fsencode(metrics_file))
        finally:
            os.close(self._go)

    async def wait(self) -> int:
        if self.returncode is not None:
            return self.returncode
        if self._exited is None:
            loop = asyncio.get_running_loop()
            self._exited = loop.create_future()
            loop.add_reader(self._pidfd, self._reap, loop)
        return await asyncio.shield(self._exited)

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return  # (the pidfd is readable once the child has exited: not reached)
        loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self.returncode = os.waitstatus_to_exitcode(status)
        assert self._exited is not None
        self._exited.set_result(self.returncode)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # through the pidfd: never another process that took the pid
            signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# The child ``fork_early`` made, until a ``PollerProcess`` starts it.
_early: _Forked | None = None


def fork_early(poll: Callable[[Path], int]) -> bool:
    """Fork the poller child now, to be started by the next ``PollerProcess.start``; ``serve``
    calls this once it has imported the server and before it starts anything.

    The child ends with this process (``die_with_parent``), waits until ``start`` tells it where
    to write its figures, then returns ``poll(metrics_file)``'s exit code; told nothing (this
    process ended before it started the poller), it exits quietly. Forking needs Linux's pidfds
    and no thread but this one; returns False when it did not fork (``start`` then starts
    ``nightshift poll``).
    """
    global _early
    if sys.platform != "linux" or not _only_thread():
        return False
    go_read, go_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the modules' objects stay where they are, shared with the child, never collected
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(go_write)
        _become_poller(parent, go_read, poll)  # never returns
    os.close(go_read)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(go_write)
        return False
    _early = _Forked(pid, pidfd, go_write)
    return True


def _only_thread() -> bool:
    """Whether this thread is the process's only one, once the threads ending now have ended."""
    deadline = time.monotonic() + _THREADS_END
    for thread in threading.enumerate():
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    return threading.active_count() == 1


def _become_poller(parent: int, go: int, poll: Callable[[Path], int]) -> None:
    """The forked child's life: wait for the word, poll, exit (never back into the parent's code)."""
    code = 1
    try:
        die_with_parent(parent)
        if sys.platform == "linux":  # its name in ps and top (the command line stays the server's)
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, b"nightshift-poll")
        told = b""
        while chunk := os.read(go, 4096):
            told += chunk
        os.close(go)
        if not told:
            code = 0  # the parent never started its poller: nothing to do
        else:
            os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
            code = poll(Path(os.fsdecode(told)))
    except KeyboardInterrupt:
        code = 0  # Ctrl-C reached the whole process group before the poller started
    except BaseException:
        log.exception("the poller process failed")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class PollerProcess:
    """``nightshift poll`` as a child of this process, started by ``start`` and stopped by ``stop``."""

    def __init__(self, *, grace: float) -> None:
        self.grace = grace
        self._folder = figures_folder()
        self.metrics_file = self._folder / "metrics.prom"
        self._process: _Child | None = None
        self._stopping = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the child (the one ``fork_early`` made, if any), and watch over it (started again
        if it exits before ``stop``)."""
        global _early
        forked, _early = _early, None
        if forked is not None:
            forked.begin(self.metrics_file)
            log.info("started the poller process %d", forked.pid)
            self._process = forked
        else:
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


def figures_folder() -> Path:
    """A new folder for the child's figures, named after this process; first, the folders of
    servers that are gone (killed before they could remove theirs) are removed."""
    root = Path(tempfile.gettempdir())
    for folder in root.glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name.removeprefix(FOLDER_PREFIX).partition("-")[0]
        with contextlib.suppress(OSError):
            if pid.isdigit() and folder.stat().st_uid == os.getuid() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    return True


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
