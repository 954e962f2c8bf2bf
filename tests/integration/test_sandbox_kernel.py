"""What bubblewrap's sandbox promises about the kernel, tried as an attacker would.

A tool reaches only the part of the kernel it has a use for; the memory it holds, wherever it
holds it, counts toward its call's limit; nothing it leaves in the kernel (keys, message queues)
reaches a later call, of its organization or another; organizations share no host uid; and the
sandbox works wherever the Python runtime lives, /tmp included. Every tool runs through the real
:class:`ToolSandbox` in bubblewrap.
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import platform
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nightshift.tools.launch import DEFAULT_UIDS, BubblewrapLauncher, SandboxLimits
from nightshift.tools.results import SandboxCall
from nightshift.tools.sandbox import ToolSandbox
from support.host import SCRATCH_ENTRIES, host_processes_with

# Syscall numbers as the kernel's asm/unistd_64.h (x86_64) and asm-generic/unistd.h (aarch64)
# give them, kept apart from the sandbox's own table so that a wrong number there shows here.
SYSCALLS = {
    "x86_64": {
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "io_uring_setup": 425,
        "userfaultfd": 323,
        "mount": 165,
        "umount2": 166,
        "unshare": 272,
        "setns": 308,
        "ptrace": 101,
        "kexec_load": 246,
        "bpf": 321,
        "perf_event_open": 298,
        "pivot_root": 155,
        "chroot": 161,
        "memfd_create": 319,
        "shmget": 29,
        "mq_open": 240,
        "fsopen": 430,
        "open_tree": 428,
        "process_vm_readv": 310,
        "inotify_init1": 294,
        "clone": 56,
        "clone3": 435,
    },
    "aarch64": {
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "io_uring_setup": 425,
        "userfaultfd": 282,
        "mount": 40,
        "umount2": 39,
        "unshare": 97,
        "setns": 268,
        "ptrace": 117,
        "kexec_load": 104,
        "bpf": 280,
        "perf_event_open": 241,
        "pivot_root": 41,
        "chroot": 51,
        "memfd_create": 279,
        "shmget": 194,
        "mq_open": 180,
        "fsopen": 430,
        "open_tree": 428,
        "process_vm_readv": 270,
        "inotify_init1": 26,
        "clone": 220,
        "clone3": 435,
    },
}[platform.machine()]
CLONE_NEWUSER, CLONE_NEWNS, CLONE_THREAD = 0x10000000, 0x00020000, 0x00010000


def call(source: str, *, org: str = "org-a", env: dict[str, str] | None = None, **arguments: object) -> SandboxCall:
    return SandboxCall(
        organization_id=org, source_code=source, function_name="tool", arguments=arguments, env=env or {}
    )


@pytest.fixture
async def sandbox() -> AsyncIterator[ToolSandbox]:
    limits = SandboxLimits(timeout=10.0, memory_mb=256, processes=8)
    async with ToolSandbox(BubblewrapLauncher(), workers=2, limits=limits) as sandbox:
        yield sandbox


SYSCALL_ERRNO = '''
import ctypes

def tool(calls: dict) -> dict:
    """Makes each syscall with the arguments given; what each returned, or its errno's name."""
    import errno
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    outcome = {}
    for name, (number, *arguments) in calls.items():
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in arguments))
        outcome[name] = errno.errorcode[ctypes.get_errno()] if result < 0 else "succeeded"
    return outcome
'''


async def test_the_kernel_surface_tools_have_no_use_for_is_refused(sandbox: ToolSandbox) -> None:
    # Arguments that do nothing harmful wherever the call gets through (most fail on a NULL
    # pointer, or on the tool's lack of privilege, after the point where the filter answers).
    calls: dict[str, list[int]] = {name: [number, 0, 0, 0, 0, 0] for name, number in SYSCALLS.items()}
    del calls["clone"], calls["unshare"], calls["clone3"]
    calls["unshare a user namespace"] = [SYSCALLS["unshare"], CLONE_NEWUSER]
    # CLONE_THREAD makes the kernel refuse these (so no process is made, whatever the filter does).
    calls["clone a user namespace"] = [SYSCALLS["clone"], CLONE_NEWUSER | CLONE_THREAD, 0, 0, 0, 0]
    calls["clone a mount namespace"] = [SYSCALLS["clone"], CLONE_NEWNS | CLONE_THREAD, 0, 0, 0, 0]
    calls["clone3"] = [SYSCALLS["clone3"], 0, 0]
    if platform.machine() == "x86_64":
        calls["getpid through the x32 ABI"] = [39 | 0x40000000]

    result = await sandbox.run(call(SYSCALL_ERRNO, calls=calls))

    assert result.ok, result.error
    expected = dict.fromkeys(calls, "EPERM")
    expected["clone3"] = "ENOSYS"  # its flags are out of the filter's sight: the C library falls back to clone
    assert result.value == expected


async def test_memory_the_call_s_limits_cannot_see_is_refused(sandbox: ToolSandbox) -> None:
    source = '''
import ctypes, os

def tool() -> dict:
    """Tries each way to hold memory that no process's counts and no file of its scratch show:
    memfd, a tmpfs in nested namespaces, System V shared memory, POSIX message queues."""
    libc = ctypes.CDLL(None, use_errno=True)
    outcome = {}
    try:
        fd = os.memfd_create("hoard")
        os.ftruncate(fd, 64 * 1024 * 1024)
        outcome["memfd"] = "made"
    except OSError as exc:
        outcome["memfd"] = exc.strerror
    if libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS
        os.makedirs("/tmp/nested", exist_ok=True)
        mounted = libc.mount(b"tmpfs", b"/tmp/nested", b"tmpfs", 0, b"size=1g")
        outcome["nested tmpfs"] = "mounted" if mounted == 0 else os.strerror(ctypes.get_errno())
    else:
        outcome["nested tmpfs"] = os.strerror(ctypes.get_errno())
    segment = libc.shmget(0, 64 * 1024 * 1024, 0o1600)
    outcome["sysv shm"] = "made" if segment >= 0 else os.strerror(ctypes.get_errno())
    libc.mq_open.restype = ctypes.c_int
    queue = libc.mq_open(b"/hoard", os.O_CREAT | os.O_RDWR, 0o600, None)
    outcome["posix mq"] = "made" if queue >= 0 else os.strerror(ctypes.get_errno())
    return outcome
'''
    result = await sandbox.run(call(source))

    assert result.ok, result.error
    assert result.value == dict.fromkeys(("memfd", "nested tmpfs", "sysv shm", "posix mq"), "Operation not permitted")


async def test_files_in_tmp_and_dev_shm_count_toward_the_memory_limit() -> None:
    source = '''
import time

def tool() -> str:
    """90 MB in /tmp, 90 MB in /dev/shm (POSIX shared memory lives there) and 100 MB in the
    process: each within a limit, together over the call's 256 MB."""
    for path in ("/tmp/hoard", "/dev/shm/hoard"):
        with open(path, "wb") as file:
            for _ in range(90):
                file.write(b"x" * 1024 * 1024)
    hoard = bytearray(100 * 1024 * 1024)
    for i in range(0, len(hoard), 4096):
        hoard[i] = 1
    time.sleep(5)
    return "held 280 MB"
'''
    limits = SandboxLimits(timeout=10.0, memory_mb=256, file_mb=100)
    async with ToolSandbox(BubblewrapLauncher(), limits=limits) as sandbox:
        result = await sandbox.run(call(source))
        after = await sandbox.run(
            call(SCRATCH_ENTRIES + "\ndef tool():\n    return scratch_entries('/tmp') + scratch_entries('/dev/shm')\n")
        )

    assert result.error == "the tool used more than 256 MB of memory (all its processes together)"
    assert after.value == []


async def test_socket_buffers_count_toward_the_memory_limit() -> None:
    source = '''
import os, socket, time

def tool() -> str:
    """Seven processes fill the buffers of every socket pair they can open: kernel memory, far
    over the call's 128 MB, that no process's counts show."""
    for _ in range(7):
        if os.fork() == 0:
            pairs = []
            try:
                for _ in range(120):
                    pairs.append(socket.socketpair())
                    for end in pairs[-1]:
                        end.setblocking(False)
                        try:
                            while True:
                                end.send(b"x" * 65536)
                        except BlockingIOError:
                            pass
            except OSError:
                pass
            time.sleep(30)
            os._exit(0)
    time.sleep(8)
    return "held"
'''
    limits = SandboxLimits(timeout=10.0, memory_mb=128, processes=8)
    async with ToolSandbox(BubblewrapLauncher(), limits=limits) as sandbox:
        result = await sandbox.run(call(source))
        after = await sandbox.run(call("def tool():\n    return 'fine'\n"))

    assert result.error == "the tool used more than 128 MB of memory (all its processes together)"
    assert after.value == "fine"


KEYCTL_READ, KEYCTL_DESCRIBE, KEYCTL_INVALIDATE = 11, 6, 21
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4


def _add_key(description: str, payload: bytes, keyring: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    key = libc.syscall(
        ctypes.c_long(SYSCALLS["add_key"]),
        b"user",
        description.encode(),
        payload,
        ctypes.c_size_t(len(payload)),
        ctypes.c_int(keyring),
    )
    if key < 0:
        raise OSError(ctypes.get_errno(), "add_key")
    return int(key)


@pytest.fixture
def server_key() -> Iterator[tuple[str, bytes]]:
    """A key in this process's session keyring, as a service manager or another organization's
    tool run before the fix could have left there."""
    description, payload = f"nightshift-test-{uuid.uuid4().hex}", b"server-keyring-secret-" + uuid.uuid4().hex.encode()
    key = _add_key(description, payload, KEY_SPEC_SESSION_KEYRING)
    yield description, payload
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(ctypes.c_long(SYSCALLS["keyctl"]), ctypes.c_long(KEYCTL_INVALIDATE), ctypes.c_long(key))


READ_KEYS = f'''
import ctypes, errno

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def syscall(number, *arguments):
    return libc.syscall(ctypes.c_long(number), *arguments)


def tool(description: str, plant: str) -> dict:
    """Looks for a key by name in every keyring it can reach and reads it; lists /proc/keys; and
    plants a key of its own in its session and user keyrings."""
    found = {{}}
    key = syscall({SYSCALLS["request_key"]}, b"user", description.encode(), None, ctypes.c_long(0))
    if key < 0:
        found["request_key"] = errno.errorcode[ctypes.get_errno()]
    else:
        buffer = ctypes.create_string_buffer(4096)
        size = syscall({SYSCALLS["keyctl"]}, ctypes.c_long({KEYCTL_READ}), ctypes.c_long(key), buffer, 4096)
        found["request_key"] = buffer.raw[: max(size, 0)].decode(errors="replace")
    for name, ring in (("session", {KEY_SPEC_SESSION_KEYRING}), ("user", {KEY_SPEC_USER_KEYRING})):
        buffer = ctypes.create_string_buffer(4096)
        size = syscall({SYSCALLS["keyctl"]}, ctypes.c_long({KEYCTL_DESCRIBE}), ctypes.c_long(ring), buffer, 4096)
        found[name] = buffer.value.decode(errors="replace") if size >= 0 else errno.errorcode[ctypes.get_errno()]
    try:
        with open("/proc/keys") as keys:
            found["/proc/keys"] = keys.read()
    except OSError as exc:
        found["/proc/keys"] = type(exc).__name__
    for ring in ({KEY_SPEC_SESSION_KEYRING}, {KEY_SPEC_USER_KEYRING}):
        payload = plant.encode()
        planted = syscall({SYSCALLS["add_key"]}, b"user", b"planted", payload, ctypes.c_size_t(len(payload)), ring)
        found[f"planted in {{ring}}"] = "planted" if planted >= 0 else errno.errorcode[ctypes.get_errno()]
    return found
'''


async def test_keys_reach_no_tool(server_key: tuple[str, bytes], sandbox: ToolSandbox) -> None:
    # server_key first: the sandbox's zygotes start with the keyring that holds it.
    description, payload = server_key

    first = await sandbox.run(call(READ_KEYS, description=description, plant="agent-a-key-secret"))
    second = await sandbox.run(call(READ_KEYS, description="planted", plant="agent-b"))
    other = await sandbox.run(call(READ_KEYS, org="org-b", description="planted", plant="org-b"))

    for result in (first, second, other):
        assert result.ok, result.error
        seen = repr(result.value)
        # The server's key: neither its secret nor its name.
        assert payload.decode() not in seen and description not in seen
        # What an earlier call tried to leave.
        assert "agent-a-key-secret" not in seen
        assert result.value["request_key"] == "EPERM"
        assert result.value[f"planted in {KEY_SPEC_SESSION_KEYRING}"] == "EPERM"
        assert result.value[f"planted in {KEY_SPEC_USER_KEYRING}"] == "EPERM"


KEYRINGS = """
def tool() -> list:
    \"\"\"The serials of the keyrings this call may see (its own session keyring among them).\"\"\"
    with open("/proc/keys") as keys:
        return sorted(line.split()[0] for line in keys if " keyring " in line)
"""


async def test_each_call_has_a_session_keyring_of_its_own(sandbox: ToolSandbox) -> None:
    seen = [await sandbox.run(call(KEYRINGS)) for _ in range(3)]

    assert all(result.ok for result in seen), [result.error for result in seen]
    # Each call sees a keyring no earlier call of the same sandbox saw: the one it joined at start.
    for earlier, later in itertools.pairwise(seen):
        assert set(later.value) - set(earlier.value), (earlier.value, later.value)


async def test_a_message_queue_reaches_no_later_call(sandbox: ToolSandbox) -> None:
    send = '''
import ctypes, os

def tool(secret: str) -> str:
    """Agent A leaves its secret in a POSIX message queue."""
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.mq_open(b"/drop", os.O_CREAT | os.O_RDWR, 0o600, None)
    if queue < 0:
        return os.strerror(ctypes.get_errno())
    data = secret.encode()
    libc.mq_send(queue, data, len(data), 0)
    return "sent"
'''
    receive = '''
import ctypes, os

def tool() -> str:
    """Agent B of the same organization looks for it."""
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.mq_open(b"/drop", os.O_RDWR | os.O_NONBLOCK, 0o600, None)
    if queue < 0:
        return os.strerror(ctypes.get_errno())
    buffer = ctypes.create_string_buffer(65536)
    size = libc.mq_receive(queue, buffer, 65536, None)
    return buffer.raw[:size].decode() if size >= 0 else os.strerror(ctypes.get_errno())
'''
    sent = await sandbox.run(call(send, secret="agent-a-mq-secret"))
    received = await sandbox.run(call(receive))

    assert sent.value == "Operation not permitted"
    assert received.value == "Operation not permitted"


HOLD_FDS_IN_FLIGHT = '''
import array, errno, socket, subprocess, sys

def tool(marker: str) -> None:
    """Sends socket descriptors into a socket that nobody reads, until the kernel says its host
    uid has too many in flight (a count per uid, bounded by the sender's open-file limit); then
    holds them, in a process whose command line tells how it stopped."""
    sender, _receiver = socket.socketpair()
    pairs = [socket.socketpair() for _ in range(50)]
    carried = [s.fileno() for pair in pairs for s in pair]
    stopped = "never"
    for _ in range(20):
        try:
            sender.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", carried))])
        except OSError as exc:
            stopped = errno.errorcode[exc.errno]
            break
    subprocess.run([sys.executable, "-c", "import time; time.sleep(30)", marker, stopped])
'''

SEND_ONE_FD = '''
import array, errno, socket

def tool() -> str:
    """Passes one socket descriptor over a socket, as any program that hands a connection on does."""
    sender, _receiver = socket.socketpair()
    carried, _other = socket.socketpair()
    try:
        sender.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [carried.fileno()]))])
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "sent"
'''


async def test_organizations_share_no_host_uid(sandbox: ToolSandbox) -> None:
    hog = asyncio.create_task(sandbox.run(call(HOLD_FDS_IN_FLIGHT, org="org-a", marker="7.6543")))
    holder = await _wait_for_process("7.6543")
    hog_uid = _host_uid(holder)
    with open(f"/proc/{holder}/cmdline", "rb") as cmdline:
        stopped = cmdline.read().split(b"\0")[-2].decode()

    other = await sandbox.run(call(SEND_ONE_FD, org="org-b"))
    watcher = asyncio.create_task(sandbox.run(call(HOLD_FDS_IN_FLIGHT, org="org-b", marker="8.7654")))
    other_uid = _host_uid(await _wait_for_process("8.7654"))
    for task in (hog, watcher):
        task.cancel()
    await asyncio.gather(hog, watcher, return_exceptions=True)

    # What one organization's tool holds of a per-uid count does not stop another's.
    assert stopped == "ETOOMANYREFS"  # its uid's count is full
    assert other.value == "sent"
    assert hog_uid != other_uid
    assert {hog_uid, other_uid} <= set(DEFAULT_UIDS)


async def test_two_servers_on_one_host_never_share_a_uid() -> None:
    # One uid for both, as the API's and the poller's processes, or two servers, would draw from
    # one range: the second cannot start a sandbox while the first holds it.
    uids = range(DEFAULT_UIDS.start + 4321, DEFAULT_UIDS.start + 4322)
    host_uid = "def tool():\n    return [line.split() for line in open('/proc/self/uid_map')][-1]\n"
    async with (
        ToolSandbox(BubblewrapLauncher(uids=uids), workers=1) as first,
        ToolSandbox(BubblewrapLauncher(uids=uids), workers=1) as second,
    ):
        held = await first.run(call(host_uid))
        refused = await second.run(call(host_uid))
    async with ToolSandbox(BubblewrapLauncher(uids=uids), workers=1) as third:
        freed = await third.run(call(host_uid))

    assert held.value == ["1000", str(uids.start), "1"]
    assert refused.error == (
        f"the tool sandbox could not start: OSError: every host uid of the tool sandbox's range (1 from {uids.start}) "
        "is taken: raise NIGHTSHIFT_TOOL_UID_COUNT to at least the tool workers of every server on this host"
    )
    assert freed.value == held.value  # the first server's sandbox is gone, and its uid free


@pytest.fixture
def runtime_under_tmp() -> Iterator[Path]:
    """A virtualenv of this interpreter under /tmp, beside a file of the host's /tmp."""
    top = Path(tempfile.mkdtemp(dir="/tmp", prefix="nightshift-runtime-"))
    (top / "host-secret.txt").write_text("the host's /tmp")
    venv = top / "deploy" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    yield venv
    shutil.rmtree(top)


async def test_tools_run_from_a_virtualenv_under_tmp(runtime_under_tmp: Path) -> None:
    venv = runtime_under_tmp
    look = '''
import os, sys

def tool(plant: bool) -> dict:
    """Where it runs from, everything of /tmp it can see, and a file planted on the way to the runtime."""
    seen = []
    for root, dirs, files in os.walk("/tmp"):
        if root == sys.prefix:
            dirs.clear()
            continue
        seen += [os.path.join(root, name) for name in dirs + files]
    planted = []
    if plant:
        for directory in ("/tmp", os.path.dirname(sys.prefix), os.path.dirname(os.path.dirname(sys.prefix))):
            try:
                with open(os.path.join(directory, "planted"), "w") as file:
                    file.write("x")
                planted.append(directory)
            except OSError:
                pass
    return {"prefix": sys.prefix, "seen": sorted(seen), "planted": planted, "ns": os.readlink("/proc/self/ns/pid")}
'''
    launcher = BubblewrapLauncher(python=str(venv / "bin" / "python3"))
    async with ToolSandbox(launcher, workers=1) as sandbox:
        first = await sandbox.run(call(look, plant=True))
        second = await sandbox.run(call(look, plant=False))

    assert first.ok, first.error
    assert first.value["prefix"] == str(venv)
    # Of the host's /tmp, only the runtime and the folders that lead to it.
    chain = [str(venv.parent.parent), str(venv.parent), str(venv)]
    assert first.value["seen"] == chain
    assert "/tmp" in first.value["planted"]
    # The wipe after a call removes what it planted and leaves the runtime: the warm sandbox goes on.
    assert second.value["seen"] == chain
    assert second.value["ns"] == first.value["ns"]


def _host_uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Uid:"))


async def _wait_for_process(marker: str) -> int:
    for _ in range(1000):
        found = host_processes_with(marker)
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no process with {marker!r} appeared")
