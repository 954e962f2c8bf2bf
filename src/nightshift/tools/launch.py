"""How a tool zygote (``_zygote.py``) is started: inside bubblewrap, or as a plain process.

:class:`BubblewrapLauncher` is the default. Each zygote gets its own user, pid, mount, IPC, UTS,
cgroup and (unless tools may go out) network namespaces. Its filesystem is a fresh root holding
read-only binds of the system directories (``/usr`` and its top-level links), a few files of
``/etc`` and the Python runtime with its packages, plus a private ``/tmp`` and ``/dev/shm`` of
bounded size; nothing else of the host, so no ``NIGHTSHIFT_HOME``, database or server file. A
runtime that lives under ``/tmp`` (a virtualenv made there) is bound over the private ``/tmp``,
alone: the zygote's wipe after each call leaves it and the directories that lead to it.

Every process of the sandbox runs under the syscall filter of :mod:`nightshift.tools.seccomp`
(no keys, System V or POSIX queue IPC, memfd, mounts, namespaces, io_uring, tracing...), which
bubblewrap installs before it starts the zygote; so a call's memory is what its processes map
plus what it writes in the private ``/tmp`` and ``/dev/shm``, which the zygote watches together.

When the server runs as root, bubblewrap would map the sandbox's user to root outside, so the
launcher writes the user namespace's id maps itself (bubblewrap waits for that on
``--userns-block-fd``): inside uid 0 stays the host's root only while bubblewrap builds the
mounts, and the zygote then switches for good to uid 1000, which outside is a uid of its own,
taken from ``uids`` (``NIGHTSHIFT_TOOL_UID_BASE`` and ``NIGHTSHIFT_TOOL_UID_COUNT``) and held by
no other live zygote: no two sandboxes share what the kernel counts per host uid (descriptors in
flight on Unix sockets, pipe buffers). What it counts per user up the namespace tree (processes,
queued signals, inotify instances) goes, above the sandbox's own namespace, to the namespace's
owner, root: each call's rlimits bound the first two and the syscall filter refuses the third.
bubblewrap cannot disable nested user namespaces in that mode; the syscall filter refuses them.

As another user, bubblewrap maps the sandbox uid to that user, so every sandbox shares that
user's counts, each call within the same bounds; and it disables nested user namespaces itself
(``--disable-userns``), on top of the filter.

:class:`ProcessLauncher` (``NIGHTSHIFT_TOOL_SANDBOX=process``) starts the zygote as a plain
child process with an empty environment: the same protocol and limits per call, no isolation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nightshift.config import DEFAULT_TOOL_UID_BASE, DEFAULT_TOOL_UID_COUNT, SandboxKind, ToolNetwork
from nightshift.tools import seccomp
from nightshift.tools.mounts import SCRATCH, mount_arguments
from nightshift.tools.stranded import ZYGOTE_TARGET, end_stranded

ZYGOTE_SCRIPT = Path(__file__).with_name("_zygote.py")
# The dynamic linker resolves every symbol of the interpreter's libraries as the zygote starts,
# not at each symbol's first call: a call's fresh process would otherwise resolve again each one
# the zygote never called (its limits, its exit), with the page copies that writing the
# resolution costs. The zygote takes it out of the environment its calls inherit.
BIND_NOW = ("LD_BIND_NOW", "1")
# The longest line read from a zygote (an answer is one line).
LINE_LIMIT = 80 * 1024 * 1024
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# The host uids the sandboxes' uid 1000 is mapped to when the server runs as root, one per zygote.
DEFAULT_UIDS = range(DEFAULT_TOOL_UID_BASE, DEFAULT_TOOL_UID_BASE + DEFAULT_TOOL_UID_COUNT)
_INSIDE_UID = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """What one tool call may use; all its processes count together."""

    timeout: float = 10.0  # seconds of wall time (CPU time per process is capped at that too)
    memory_mb: int = 512  # address space of each process; in bubblewrap also all processes together
    processes: int = 32  # processes and threads at once
    open_files: int = 256  # file descriptors per process
    file_mb: int = 64  # largest file written, and the size of the private /tmp

    def zygote_arguments(self) -> list[str]:
        return [
            f"--memory-mb={self.memory_mb}",
            f"--processes={self.processes}",
            f"--open-files={self.open_files}",
            f"--file-mb={self.file_mb}",
        ]


@dataclass(slots=True)
class Started:
    """A zygote process just started, and what to remove once it has exited."""

    process: asyncio.subprocess.Process
    scratch: str | None = None
    uid: int | None = None  # the host uid of its tools, while no other zygote may take it


class Launcher(Protocol):
    """Starts zygote processes of one kind.

    Contract:
        * ``missing`` says, without starting anything, what this machine lacks for it (None: nothing).
        * ``start`` starts one zygote whose stdin/stdout/stderr are pipes; it may raise ``OSError``.
        * ``kill`` ends the zygote and every process it started.
    """

    kind: SandboxKind

    def missing(self) -> str | None:
        """What is missing to start a zygote, in words an operator can act on."""
        ...

    async def start(self, limits: SandboxLimits) -> Started:
        """Start one zygote."""
        ...

    def kill(self, started: Started) -> None:
        """SIGKILL the zygote and everything it started."""
        ...


class BubblewrapLauncher:
    """Zygotes inside bubblewrap's namespaces (see the module docstring)."""

    kind = SandboxKind.BUBBLEWRAP

    def __init__(
        self,
        *,
        binary: str = "bwrap",
        network: ToolNetwork = ToolNetwork.NONE,
        hidden: Sequence[Path] = (),
        python: str | None = None,
        uids: range = DEFAULT_UIDS,
    ) -> None:
        """Configure; nothing starts here.

        Args:
            binary: The bubblewrap executable, a name looked up on PATH or a path.
            network: What network the tools get.
            hidden: Paths that must stay out of sight even when they lie inside a bound directory
                (``NIGHTSHIFT_HOME``, the SQLite database's folder): an empty tmpfs covers them.
            python: The interpreter that runs the zygote and the tools, with its virtualenv if it
                is one (default: the server's own).
            uids: The host uids the sandboxes run as when the server runs as root, one per live
                zygote of every server process on this host; a zygote cannot start while every one
                of them is taken.
        """
        self.binary = binary
        self.network = network
        self.uids = uids
        self._resolved = shutil.which(binary)
        if python is None:
            executable = sys.executable
            prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
        else:
            executable, prefixes = python, []
        # Its folder resolved (a path inside the sandbox has no host symlinks to follow), its name
        # not: a virtualenv's interpreter is a link, and Python finds the virtualenv by the link.
        self._python = str(Path(executable).absolute().parent.resolve() / Path(executable).name)
        prefixes.append(str(Path(self._python).parent.parent))
        self._system, self._runtime, self._keep = mount_arguments(self._python, prefixes, hidden)
        # The uids this process's live zygotes hold, each with the lock that keeps other server
        # processes on this host (the API's and the poller's, other servers) from taking it too.
        self._uid_locks: dict[int, socket.socket] = {}
        self._next_uid = secrets.randbelow(len(uids)) if uids else 0

    def missing(self) -> str | None:
        if sys.platform != "linux":
            return f"the tool sandbox needs Linux namespaces, and this is {sys.platform}"
        if self._resolved is None:
            return (
                f"the tool sandbox needs bubblewrap, and {self.binary!r} was not found "
                "(install it: apt-get install bubblewrap)"
            )
        return seccomp.supported()

    async def start(self, limits: SandboxLimits) -> Started:
        assert self._resolved is not None, "start() after missing() said what is missing"
        # What a server that died as its zygotes started left waiting (see ``stranded``): a
        # look at /proc, off the event loop.
        await asyncio.to_thread(end_stranded, self._resolved)
        as_root = os.geteuid() == 0
        uid = self._take_uid() if as_root else None
        info_r, info_w = os.pipe() if as_root else (-1, -1)
        block_r, block_w = os.pipe() if as_root else (-1, -1)
        filter_r = _pipe_holding(seccomp.program())
        scratch_size = str(limits.file_mb * 1024 * 1024)
        argv = [
            self._resolved,
            "--unshare-all",
            *(["--share-net"] if self.network is ToolNetwork.OUTBOUND else []),
            "--unshare-user",
            # As root the id maps are written from here, which bubblewrap's own way of disabling
            # user namespaces does not allow: the syscall filter refuses them in both cases.
            *([] if as_root else ["--disable-userns"]),
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--hostname",
            "sandbox",
            *self._identity(as_root, info_w=info_w, block_r=block_r),
            "--seccomp",
            str(filter_r),
            *self._system,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *("--perms", "1777", "--size", scratch_size, "--tmpfs", "/tmp"),
            *("--perms", "1777", "--size", scratch_size, "--tmpfs", "/dev/shm"),
            # After the private /tmp, so that a runtime under /tmp shows through it.
            *self._runtime,
            "--ro-bind",
            str(ZYGOTE_SCRIPT),
            ZYGOTE_TARGET,
            # As another user than root, bubblewrap makes the root and /dev the sandbox uid's own:
            # only the scratch directories, wiped after each call, stay writable.
            *("--remount-ro", "/", "--remount-ro", "/dev"),
            "--chdir",
            "/tmp",
            "--clearenv",
            *("--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"),
            *("--setenv", "LANG", "C.UTF-8", "--setenv", *BIND_NOW),
            self._python,
            "-I",
            "-B",
            ZYGOTE_TARGET,
            "--isolated",
            *([] if self.network is ToolNetwork.OUTBOUND else ["--own-network"]),
            *(f"--scratch={path}" for path in SCRATCH),
            *(f"--keep={path}" for path in self._keep),
            *limits.zygote_arguments(),
        ]
        ours = [fd for fd in (info_w, block_r, filter_r) if fd >= 0]
        handshake = [fd for fd in (info_r, block_w) if fd >= 0]
        try:
            process, cut_off = await _spawn(
                argv,
                env={"PATH": SANDBOX_PATH},
                pass_fds=ours,
                # Root's supplementary groups would follow the sandbox into its namespace.
                extra_groups=[] if as_root else None,
                # Its own process group, which kill() ends (see there).
                start_new_session=True,
            )
        except BaseException:
            if uid is not None:
                self._release_uid(uid)
            _close_all(handshake)
            raise
        finally:
            _close_all(ours)
        started = Started(process=process, uid=uid)
        try:
            if cut_off:
                raise asyncio.CancelledError
            if uid is not None:
                await _map_ids(info_r, block_w, uid)
        except BaseException:  # cancelled too: a server that stops as a zygote starts
            self.kill(started)
            await _reap(process)
            raise
        finally:
            _close_all(handshake)
        return started

    def _take_uid(self) -> int:
        """A host uid of ``uids`` that no live zygote on this host holds.

        The lock is an abstract Unix socket name: binding it is atomic across processes, and the
        kernel frees it when the socket closes, however the process ends.
        """
        for _ in range(len(self.uids)):
            uid = self.uids[self._next_uid % len(self.uids)]
            self._next_uid += 1
            if uid in self._uid_locks:
                continue
            lock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                lock.bind(f"\0nightshift-tool-uid-{uid}")
            except OSError:
                lock.close()
                continue
            self._uid_locks[uid] = lock
            return uid
        raise OSError(
            f"every host uid of the tool sandbox's range ({len(self.uids)} from {self.uids.start}) is taken: "
            "raise NIGHTSHIFT_TOOL_UID_COUNT to at least the tool workers of every server on this host"
        )

    def _release_uid(self, uid: int) -> None:
        lock = self._uid_locks.pop(uid, None)
        if lock is not None:
            lock.close()

    def _identity(self, as_root: bool, *, info_w: int, block_r: int) -> list[str]:
        if not as_root:
            return ["--uid", str(_INSIDE_UID), "--gid", str(_INSIDE_UID)]
        # Only to let the zygote give up root inside for the sandbox uid (see the module docstring).
        caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return ["--userns-block-fd", str(block_r), "--info-fd", str(info_w), *caps]

    def kill(self, started: Started) -> None:
        # --die-with-parent: the zygote, pid 1 of its namespace, dies with bubblewrap, and every
        # process of the namespace with it; so its uid is free for another zygote. Before the
        # namespace is set up, bubblewrap's second process is not yet bound to the first and
        # waits for it (holding the pipes): the process group, which it leaves only then, ends it
        # (while the first is not yet reaped: its pid, and so the group's id, is not free).
        if started.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(started.process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            started.process.kill()
        if started.uid is not None:
            self._release_uid(started.uid)
            started.uid = None


def _pipe_holding(data: bytes) -> int:
    """The read end of a pipe that holds ``data`` and then ends (the filter, for bubblewrap)."""
    read, write = os.pipe()
    try:
        view = memoryview(data)  # far below a pipe's capacity: the writes do not block
        while view:
            view = view[os.write(write, view) :]
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


async def _map_ids(info_r: int, block_w: int, uid: int) -> None:
    """Map the sandbox's uid and gid 1000 to ``uid`` outside, then let bubblewrap go on.

    Root inside stays root outside, for bubblewrap's own setup (it owns the new root it creates);
    nothing that runs a tool keeps it. bubblewrap's report is awaited on the event loop, not in a
    thread, so that a start cut off there leaves no thread reading a descriptor closed under it.
    """
    loop = asyncio.get_running_loop()
    os.set_blocking(info_r, False)
    info = b""
    while not info.rstrip().endswith(b"}"):
        readable = loop.create_future()
        loop.add_reader(info_r, _wake, readable)
        try:
            await readable
        finally:
            loop.remove_reader(info_r)
        chunk = os.read(info_r, 4096)
        if not chunk:
            return  # bubblewrap failed before making the namespace; its stderr says why
        info += chunk
    _write_id_maps(json.loads(info)["child-pid"], uid)
    os.write(block_w, b"1")


def _write_id_maps(child: int, uid: int) -> None:
    # Files of /proc, which the kernel answers at once: nothing here waits on a disk.
    mapping = f"0 0 1\n{_INSIDE_UID} {uid} 1\n"
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{child}/{name}", "w") as file:
            file.write(mapping)


async def _spawn(argv: Sequence[str], **options: Any) -> tuple[asyncio.subprocess.Process, bool]:
    """Start a zygote's process with pipes for its three streams, and whether the caller was
    cancelled meanwhile (the process is then the caller's to kill and reap).

    The start is never cut off midway: asyncio's cleanup of a start cancelled before its pipes
    are connected kills bubblewrap's first process alone and then waits for pipes it connects only
    afterwards, which the second keeps open (it waits for the first, see ``kill``): the start
    would hang, and its transport be left to the garbage collector.
    """
    spawning = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
            **options,
        )
    )
    cancelled = False
    while not spawning.done():
        try:
            await asyncio.wait([spawning])  # which, cancelled, leaves the start running
        except asyncio.CancelledError:
            cancelled = True
    if cancelled and spawning.exception() is not None:
        raise asyncio.CancelledError from spawning.exception()
    return spawning.result(), cancelled


def _close_all(fds: list[int]) -> None:
    """Close each descriptor once (the list is emptied)."""
    while fds:
        os.close(fds.pop())


def _wake(readable: asyncio.Future[None]) -> None:
    if not readable.done():
        readable.set_result(None)


async def _reap(process: asyncio.subprocess.Process) -> None:
    """Close a killed zygote's stdin and wait (5 s at most) for it to end and its output to close,
    so that nothing of it outlives its start. A start is cut off when its server stops, whose loop
    may cancel it again before it closes: a cancellation meanwhile does not stop the wait (it is
    raised once the zygote is reaped). Before Python 3.12 ``communicate`` leaves stdin open.
    """
    if process.stdin is not None:
        process.stdin.close()
    deadline = asyncio.get_running_loop().time() + 5.0
    cancelled = False
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                await process.communicate()
            break
        except TimeoutError:
            break
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


class ProcessLauncher:
    """Zygotes as plain child processes: an empty environment and rlimits, nothing more."""

    kind = SandboxKind.PROCESS

    def missing(self) -> str | None:
        return None

    async def start(self, limits: SandboxLimits) -> Started:
        home = await asyncio.to_thread(tempfile.mkdtemp, prefix="nightshift-tool-")
        env = {"PATH": SANDBOX_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", BIND_NOW[0]: BIND_NOW[1]}
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-B",
                str(ZYGOTE_SCRIPT),
                f"--scratch={home}",
                *limits.zygote_arguments(),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=home,
                env=env,
                start_new_session=True,  # its own process group, which kill() ends
                limit=LINE_LIMIT,
            )
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, home, ignore_errors=True)
            raise
        return Started(process=process, scratch=home)

    def kill(self, started: Started) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(started.process.pid, signal.SIGKILL)
