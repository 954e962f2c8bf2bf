"""What bubblewrap's sandbox promises, tried as an attacker would: each attack must fail.

A tool sees no server secret, file, process or network, cannot outlive its call or exceed its
limits with children, and nothing of one call (another organization's, or an earlier one of its
own) reaches another. The same attacks through the API are in ``test_tool_isolation_api.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nightshift.config import ToolNetwork
from nightshift.tools.launch import DEFAULT_UIDS, BubblewrapLauncher, SandboxLimits
from nightshift.tools.results import SandboxCall
from nightshift.tools.sandbox import ToolSandbox
from support.host import SCRATCH_ENTRIES, host_processes_with

SERVER_SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-server-secret",
    "OPENAI_API_KEY": "sk-openai-server-secret",
    "NIGHTSHIFT_SERVER_PASSWORD": "hunter2-server-password",
}


def call(source: str, *, org: str = "org-a", env: dict[str, str] | None = None, **arguments: object) -> SandboxCall:
    return SandboxCall(
        organization_id=org, source_code=source, function_name="tool", arguments=arguments, env=env or {}
    )


@pytest.fixture
async def sandbox(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ToolSandbox]:
    for name, value in SERVER_SECRETS.items():
        monkeypatch.setenv(name, value)
    limits = SandboxLimits(timeout=10.0, memory_mb=256, processes=8)
    async with ToolSandbox(BubblewrapLauncher(), workers=2, limits=limits) as sandbox:
        yield sandbox


@pytest.fixture
def decoy() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the host that tools must not be able to signal."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


READ_EVERYTHING = '''
import os

def tool() -> dict:
    """Every environment the tool can read: its own and every process's in /proc."""
    found = {"own": dict(os.environ), "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()), "environ": {}}
    for pid in found["pids"]:
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                found["environ"][pid] = environ.read().decode(errors="replace")
        except OSError as exc:
            found["environ"][pid] = type(exc).__name__
    return found
'''


async def test_no_server_secret_in_any_environment(sandbox: ToolSandbox) -> None:
    result = await sandbox.run(call(READ_EVERYTHING, env={"AGENT_KEY": "mine"}))

    assert result.ok, result.error
    seen = repr(result.value)
    for name, value in SERVER_SECRETS.items():
        assert name not in seen and value not in seen
    assert result.value["own"]["AGENT_KEY"] == "mine"
    assert set(result.value["own"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "PWD", "AGENT_KEY"}
    # Its own pid namespace: the zygote (pid 1, whose memory and environment are closed to the
    # tool) and the call's process; no process of the host.
    assert result.value["pids"][0] == "1" and len(result.value["pids"]) <= 3
    assert result.value["environ"]["1"] == "PermissionError"


async def test_no_server_file_is_visible_or_writable(sandbox: ToolSandbox, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "nightshift.db").write_text("every organization's data")
    source = '''
import os

def tool(paths: list, writes: list) -> dict:
    """Tries to read and to write where the server keeps its things."""
    outcome = {}
    for path in paths:
        try:
            with open(path, "rb") as file:
                outcome[path] = "read " + str(len(file.read()))
        except OSError as exc:
            outcome[path] = type(exc).__name__
    for path in writes:
        try:
            with open(path, "w") as file:
                file.write("pwned")
            outcome[path] = "written"
        except OSError as exc:
            outcome[path] = type(exc).__name__
    return outcome
'''
    reads = [str(home / "nightshift.db"), __file__, "/etc/shadow", "/etc/passwd", "/root/.bash_history"]
    writes = [str(home / "pwned"), "/usr/pwned", "/pwned", f"{sys.prefix}/pwned"]

    result = await sandbox.run(call(source, paths=reads, writes=writes))

    assert result.ok, result.error
    for path in reads:
        assert result.value[path] in ("FileNotFoundError", "PermissionError"), (path, result.value[path])
    for path in writes:
        assert result.value[path] in ("FileNotFoundError", "OSError", "PermissionError"), (path, result.value[path])
        assert not Path(path).exists()


CONNECT = '''
import socket

def tool(port: int) -> str:
    """Connects to a port of the host's loopback."""
    with socket.socket() as sock:
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError as exc:
            return type(exc).__name__
        return "connected"
'''


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A service on the host's loopback, as the server, PostgreSQL or Redis would be."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.settimeout(0.5)
        yield sock


async def test_no_network_by_default(sandbox: ToolSandbox, listener: socket.socket) -> None:
    result = await sandbox.run(call(CONNECT, port=listener.getsockname()[1]))

    assert result.value == "ConnectionRefusedError"  # its own loopback, where nothing listens
    with pytest.raises(TimeoutError):
        listener.accept()


async def test_outbound_network_reaches_the_host(listener: socket.socket) -> None:
    # The documented risk of NIGHTSHIFT_TOOL_NETWORK=outbound: the host's network, loopback included.
    async with ToolSandbox(BubblewrapLauncher(network=ToolNetwork.OUTBOUND)) as sandbox:
        result = await sandbox.run(call(CONNECT, port=listener.getsockname()[1]))

    assert result.value == "connected"


async def test_host_processes_cannot_be_signalled(sandbox: ToolSandbox, decoy: subprocess.Popen[bytes]) -> None:
    source = '''
import os, signal

def tool(pids: list) -> dict:
    """Signals processes of the host."""
    outcome = {}
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            outcome[pid] = "killed"
        except OSError as exc:
            outcome[pid] = type(exc).__name__
    return outcome
'''
    result = await sandbox.run(call(source, pids=[decoy.pid, os.getpid()]))

    assert set(result.value.values()) == {"ProcessLookupError"}, result.value
    assert decoy.poll() is None


async def test_the_tool_runs_as_an_unprivileged_uid_of_the_sandbox_range_on_the_host(sandbox: ToolSandbox) -> None:
    marker = "9.8765"
    source = f'''
import os, subprocess

def tool() -> list:
    """Runs a command long enough to be seen from outside."""
    subprocess.run(["sleep", "{marker}"])
    return [os.getuid(), os.getgid(), os.getgroups()]
'''
    task = asyncio.create_task(sandbox.run(call(source)))
    pid = await _wait_for_process(marker)
    with open(f"/proc/{pid}/status") as status:
        ids = {line.split(":")[0]: line.split()[1:] for line in status if line.startswith(("Uid", "Gid", "Cap"))}
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

    uid = int(ids["Uid"][0])
    assert uid in DEFAULT_UIDS
    assert ids["Uid"] == [str(uid)] * 4
    assert ids["Gid"] == [str(uid)] * 4
    assert set(ids["CapEff"]) == {"0000000000000000"}
    assert set(ids["CapPrm"]) == {"0000000000000000"}


async def test_nothing_outlives_the_call(sandbox: ToolSandbox) -> None:
    source = '''
import os, subprocess

def tool() -> str:
    """Leaves processes behind in every way it can: a new session, a double fork, a plain child."""
    subprocess.Popen(["sleep", "301.25"], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "302.25"])
        os._exit(0)
    subprocess.Popen(["sleep", "303.25"])
    return "left three sleepers"
'''
    result = await sandbox.run(call(source))

    assert result.value == "left three sleepers"
    for marker in ("301.25", "302.25", "303.25"):
        assert host_processes_with(marker) == [], marker


async def test_children_cannot_pass_the_memory_limit_together(sandbox: ToolSandbox) -> None:
    source = '''
import os, time

def tool() -> str:
    """Six children of 80 MB each: each under the 256 MB limit, together far over it."""
    children = []
    for _ in range(6):
        pid = os.fork()
        if pid == 0:
            hoard = bytearray(80 * 1024 * 1024)
            for i in range(0, len(hoard), 4096):
                hoard[i] = 1
            time.sleep(30)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    return "held 480 MB"
'''
    result = await sandbox.run(call(source))

    assert result.error == "the tool used more than 256 MB of memory (all its processes together)"
    assert (await sandbox.run(call("def tool():\n    return 'fine'\n"))).value == "fine"


async def test_fork_bombs_stop_at_the_process_limit(sandbox: ToolSandbox) -> None:
    source = '''
import os, time

def tool() -> int:
    """Forks 30 children that wait, counting those the kernel allowed."""
    started = 0
    for _ in range(30):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        started += 1
    return started
'''
    result = await sandbox.run(call(source))

    assert result.ok, result.error
    assert result.value <= 8


async def test_private_tmp_is_bounded() -> None:
    source = '''
def tool() -> str:
    """Fills /tmp with 1 MB files."""
    for i in range(100):
        try:
            with open(f"/tmp/fill-{i}", "wb") as file:
                file.write(b"x" * 1024 * 1024)
        except OSError as exc:
            return f"{type(exc).__name__} after {i} files"
    return "wrote 100 MB"
'''
    async with ToolSandbox(BubblewrapLauncher(), limits=SandboxLimits(file_mb=8)) as sandbox:
        result = await sandbox.run(call(source))

    assert result.value in ("OSError after 7 files", "OSError after 8 files")


SPY = (
    SCRATCH_ENTRIES
    + '''
import json, os

def tool() -> dict:
    """Plants everything that could watch the next call, and reports what earlier calls left."""
    files = [f"{d}/{e}" for d in ("/tmp", "/dev/shm") for e in scratch_entries(d)]
    found = {"files": files, "patched": hasattr(json, "spied")}
    json.spied = True
    original = json.dumps
    def spying(*args, **kwargs):
        with open("/tmp/log", "a") as log:
            log.write(repr(args) + repr(dict(os.environ)))
        return original(*args, **kwargs)
    json.dumps = spying
    for path in ("/tmp/log", "/dev/shm/log"):
        with open(path, "w") as file:
            file.write("planted")
    if os.fork() == 0:
        os.setsid()
        import time
        time.sleep(5)
        os._exit(0)
    found["namespace"] = os.readlink("/proc/self/ns/pid")
    return found
'''
)

VICTIM = '''
import json, os

def tool(card: str) -> dict:
    """Handles a secret of its own."""
    namespace = os.readlink("/proc/self/ns/pid")
    return {"echo": json.loads(json.dumps(card)), "key": os.environ.get("BANK_KEY"), "ns": namespace}
'''


async def test_one_call_never_observes_another(sandbox: ToolSandbox) -> None:
    first = await sandbox.run(call(SPY, org="org-a"))
    victim = await sandbox.run(call(VICTIM, org="org-b", env={"BANK_KEY": "bank-secret"}, card="4111-1111"))
    again = await sandbox.run(call(SPY, org="org-a"))

    assert victim.value["echo"] == "4111-1111" and victim.value["key"] == "bank-secret"
    # Another organization runs in another sandbox altogether.
    assert victim.value["ns"] != first.value["namespace"]
    # The organization's own next call starts clean: no file, no patch, nothing that ran on.
    assert first.value["files"] == [] and again.value["files"] == []
    assert first.value["patched"] is False and again.value["patched"] is False
    assert again.value["namespace"] == first.value["namespace"]  # the same warm sandbox
    assert "bank-secret" not in repr(again.value)


async def test_system_v_ipc_cannot_be_left_behind(sandbox: ToolSandbox) -> None:
    source = '''
import ctypes, os

def tool() -> dict:
    """Makes each kind of System V IPC object, which outlive processes."""
    libc = ctypes.CDLL(None, use_errno=True)
    made = {
        "shm": libc.shmget(0, 4096, 0o1600),  # IPC_PRIVATE, IPC_CREAT | 0600
        "sem": libc.semget(0, 1, 0o1600),
        "msg": libc.msgget(0, 0o1600),
    }
    return {kind: "made" if made[kind] >= 0 else os.strerror(ctypes.get_errno()) for kind in made}
'''
    namespace = "import os\ndef tool():\n    return os.readlink('/proc/self/ns/ipc')\n"
    before = await sandbox.run(call(namespace))
    left = await sandbox.run(call(source))
    after = await sandbox.run(call(namespace))

    assert left.value == {
        "shm": "Operation not permitted",
        "sem": "Operation not permitted",
        "msg": "Operation not permitted",
    }
    assert after.value == before.value  # nothing was left, so the warm sandbox goes on


async def _wait_for_process(marker: str) -> int:
    for _ in range(500):
        found = host_processes_with(marker)
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no process with {marker!r} appeared")
