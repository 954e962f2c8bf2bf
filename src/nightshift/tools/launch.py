"""How a tool zygote (``_zygote.py``) is started: inside bubblewrap, or as a plain process.

:class:`BubblewrapLauncher` is the default. Each zygote gets its own user, pid, mount, IPC, UTS,
cgroup and (unless tools may go out) network namespaces. Its filesystem is a fresh root holding
read-only binds of the system directories (``/usr`` and its top-level links), a few files of
``/etc`` and the Python runtime with its packages, plus a private ``/tmp`` and ``/dev/shm`` of
bounded size; nothing else of the host, so no ``NIGHTSHIFT_HOME``, database or server file.

When the server runs as root, bubblewrap would map the sandbox's user to root outside, so the
launcher writes the user namespace's id maps itself (bubblewrap waits for that on
``--userns-block-fd``): inside uid 0 stays the host's root only while bubblewrap builds the
mounts, and the zygote then switches for good to uid 1000, which is ``nobody`` (65534) outside.
As another user, bubblewrap maps the sandbox uid to that user.

:class:`ProcessLauncher` (``NIGHTSHIFT_TOOL_SANDBOX=process``) starts the zygote as a plain
child process with an empty environment: the same protocol and limits per call, no isolation.
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nightshift.config import SandboxKind, ToolNetwork

ZYGOTE_SCRIPT = Path(__file__).with_name("_zygote.py")
# The longest line read from a zygote (an answer is one line).
LINE_LIMIT = 80 * 1024 * 1024
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
OUTSIDE_UID = 65534  # nobody: what the sandbox's uid 1000 is on the host when the server is root
_INSIDE_UID = 1000
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc a Python program and its libraries read: the loader cache, name resolution,
# certificates, time zones, the alternatives that /usr/bin links point into.
_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "mime.types",
    "ssl",
    "ca-certificates",
    "alternatives",
)


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
    ) -> None:
        """Configure; nothing starts here.

        Args:
            binary: The bubblewrap executable, a name looked up on PATH or a path.
            network: What network the tools get.
            hidden: Paths that must stay out of sight even when they lie inside a bound directory
                (``NIGHTSHIFT_HOME``, the SQLite database's folder): an empty tmpfs covers them.
        """
        self.binary = binary
        self.network = network
        self._resolved = shutil.which(binary)
        self._mounts = _mount_arguments(hidden)

    def missing(self) -> str | None:
        if sys.platform != "linux":
            return f"the tool sandbox needs Linux namespaces, and this is {sys.platform}"
        if self._resolved is None:
            return (
                f"the tool sandbox needs bubblewrap, and {self.binary!r} was not found "
                "(install it: apt-get install bubblewrap)"
            )
        return None

    async def start(self, limits: SandboxLimits) -> Started:
        assert self._resolved is not None, "start() after missing() said what is missing"
        as_root = os.geteuid() == 0
        info_r, info_w = os.pipe() if as_root else (-1, -1)
        block_r, block_w = os.pipe() if as_root else (-1, -1)
        argv = [
            self._resolved,
            "--unshare-all",
            *(["--share-net"] if self.network is ToolNetwork.OUTBOUND else []),
            "--unshare-user",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--hostname",
            "sandbox",
            *self._identity(as_root, info_w=info_w, block_r=block_r),
            *self._mounts,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--size",
            str(limits.file_mb * 1024 * 1024),
            "--tmpfs",
            "/tmp",
            "--perms",
            "1777",
            "--size",
            str(limits.file_mb * 1024 * 1024),
            "--tmpfs",
            "/dev/shm",
            "--ro-bind",
            str(ZYGOTE_SCRIPT),
            "/nightshift/zygote.py",
            "--chdir",
            "/tmp",
            "--clearenv",
            *("--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"),
            *("--setenv", "LANG", "C.UTF-8"),
            sys.executable,
            "-I",
            "-B",
            "/nightshift/zygote.py",
            "--isolated",
            "--scratch=/tmp",
            "--scratch=/dev/shm",
            *limits.zygote_arguments(),
        ]
        ours = [fd for fd in (info_w, block_r) if fd >= 0]
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={"PATH": SANDBOX_PATH},
                pass_fds=ours,
                # Root's supplementary groups would follow the sandbox into its namespace.
                extra_groups=[] if as_root else None,
                limit=LINE_LIMIT,
            )
        finally:
            for fd in ours:
                os.close(fd)
        if as_root:
            try:
                await asyncio.to_thread(_map_ids, info_r, block_w)
            finally:
                os.close(info_r)
                os.close(block_w)
        return Started(process=process)

    def _identity(self, as_root: bool, *, info_w: int, block_r: int) -> list[str]:
        if not as_root:
            return ["--uid", str(_INSIDE_UID), "--gid", str(_INSIDE_UID)]
        # Only to let the zygote give up root inside for the sandbox uid (see the module docstring).
        caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return ["--userns-block-fd", str(block_r), "--info-fd", str(info_w), *caps]

    def kill(self, started: Started) -> None:
        # --die-with-parent: the zygote, pid 1 of its namespace, dies with bubblewrap, and every
        # process of the namespace with it.
        with contextlib.suppress(ProcessLookupError):
            started.process.kill()


def _map_ids(info_r: int, block_w: int) -> None:
    """Map the sandbox's uid and gid 1000 to nobody, then let bubblewrap go on.

    Root inside stays root outside, for bubblewrap's own setup (it owns the new root it creates);
    nothing that runs a tool keeps it.
    """
    info = b""
    while chunk := os.read(info_r, 4096):
        info += chunk
        if info.rstrip().endswith(b"}"):
            break
    if not info:
        return  # bubblewrap failed before making the namespace; its stderr says why
    child = json.loads(info)["child-pid"]
    mapping = f"0 0 1\n{_INSIDE_UID} {OUTSIDE_UID} 1\n"
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{child}/{name}", "w") as file:
            file.write(mapping)
    os.write(block_w, b"1")


def _mount_arguments(hidden: Sequence[Path]) -> list[str]:
    """bubblewrap's arguments for the read-only view of the system and the Python runtime."""
    arguments: list[str] = []
    bound: list[Path] = []
    for name in _SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            arguments += ["--ro-bind", name, name]
            bound.append(path)
    for entry in _ETC_ENTRIES:
        arguments += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
    runtime = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    runtime.add(Path(os.path.realpath(sys.executable)).parent.parent)
    made: set[Path] = set()
    for path in sorted(runtime):
        if any(path.is_relative_to(b) for b in bound):
            continue
        # Parents are made world-readable: they may be private on the host (/root for pyenv).
        for parent in reversed(path.parents[:-1]):
            if parent not in made and not any(parent.is_relative_to(b) for b in bound):
                arguments += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        arguments += ["--ro-bind", str(path), str(path)]
        bound.append(path)
    for path in hidden:
        resolved = path.expanduser().resolve()
        if any(resolved.is_relative_to(b) for b in bound) and resolved.is_dir():
            arguments += ["--tmpfs", str(resolved)]
    return arguments


class ProcessLauncher:
    """Zygotes as plain child processes: an empty environment and rlimits, nothing more."""

    kind = SandboxKind.PROCESS

    def missing(self) -> str | None:
        return None

    async def start(self, limits: SandboxLimits) -> Started:
        home = await asyncio.to_thread(tempfile.mkdtemp, prefix="nightshift-tool-")
        env = {"PATH": SANDBOX_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
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
