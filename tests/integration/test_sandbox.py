"""The tool sandbox with real zygote processes: results, failures, limits, pooling, cleanup.

Every behaviour here holds for both launchers: inside bubblewrap (the default) and as plain
processes (``NIGHTSHIFT_TOOL_SANDBOX=process``). What only bubblewrap promises, isolation, is in
``test_sandbox_isolation.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nightshift.config import SandboxKind, Settings
from nightshift.errors import ToolError
from nightshift.tools import _zygote
from nightshift.tools.launch import DEFAULT_UIDS, BubblewrapLauncher, Launcher, ProcessLauncher, SandboxLimits
from nightshift.tools.results import SandboxCall
from nightshift.tools.sandbox import ToolSandbox, build_sandbox
from nightshift.tools.stranded import ZYGOTE_TARGET
from nightshift.tools.zygotes import ANSWER_BYTES
from support.host import SCRATCH_ENTRIES

ORG = "org-test"


def call(
    source: str, function_name: str = "tool", *, org: str = ORG, env: dict[str, str] | None = None, **arguments: object
) -> SandboxCall:
    return SandboxCall(
        organization_id=org, source_code=source, function_name=function_name, arguments=arguments, env=env or {}
    )


ADD = '''
def tool(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''

LEAK = '''
import sys

def tool() -> int:
    """Counts calls in state that would outlive the call if the process did (a module attribute)."""
    sys.leaked = getattr(sys, "leaked", 0) + 1
    return sys.leaked
'''


def launcher_of(kind: SandboxKind) -> Launcher:
    return BubblewrapLauncher() if kind is SandboxKind.BUBBLEWRAP else ProcessLauncher()


@pytest.fixture(params=list(SandboxKind))
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[ToolSandbox]:
    limits = SandboxLimits(timeout=5.0, memory_mb=256)
    async with ToolSandbox(launcher_of(request.param), workers=2, limits=limits) as sandbox:
        yield sandbox


async def test_returns_the_value(sandbox: ToolSandbox) -> None:
    result = await sandbox.run(call(ADD, a=2, b=3))

    assert result.ok
    assert result.value == 5
    assert result.error is None
    assert result.duration_ms > 0


async def test_prints_come_back_without_breaking_the_protocol(sandbox: ToolSandbox) -> None:
    source = '''
import os
import sys

def tool(name: str) -> dict:
    """Chatty."""
    print("hello", name)
    print('{"ok": true, "value": 999}')  # looks like a protocol line: must stay tool output
    print("warning!", file=sys.stderr)
    os.write(1, b"raw bytes to fd 1\\n")  # below sys.stdout: must not reach the protocol either
    return {"greeting": f"hi {name}", "n": [1, 2.5, None, True]}
'''
    result = await sandbox.run(call(source, name="ada"))

    assert result.ok, result.error
    assert result.value == {"greeting": "hi ada", "n": [1, 2.5, None, True]}
    assert result.stdout == 'hello ada\n{"ok": true, "value": 999}\n'
    assert result.stderr == "warning!\n"
    assert (await sandbox.run(call(ADD, a=1, b=1))).value == 2


async def test_an_exception_becomes_the_error(sandbox: ToolSandbox) -> None:
    source = '''
def tool(x: int) -> int:
    """Fails."""
    print("before")
    raise ValueError(f"bad x: {x}")
'''
    result = await sandbox.run(call(source, x=7))

    assert not result.ok
    assert result.value is None
    assert result.error == "ValueError: bad x: 7"
    assert result.stdout == "before\n"


async def test_bad_calls_are_errors_not_crashes(sandbox: ToolSandbox) -> None:
    wrong_argument = await sandbox.run(call(ADD, a=1, c=2))
    missing_function = await sandbox.run(call(ADD, "nope"))
    syntax_error = await sandbox.run(call("def tool(:\n", a=1))
    exits = await sandbox.run(call("import sys\ndef tool():\n    sys.exit(4)\n"))
    reads_stdin = await sandbox.run(call("def tool():\n    return input()\n"))
    is_async = await sandbox.run(call("async def tool():\n    return 1\n"))

    assert wrong_argument.error == "TypeError: tool() got an unexpected keyword argument 'c'"
    assert missing_function.error == "NameError: source_code defines no function 'nope'"
    assert syntax_error.error is not None and syntax_error.error.startswith("SyntaxError: ")
    assert exits.error == "SystemExit: 4"
    # Tools cannot read the request stream: their stdin is empty.
    assert reads_stdin.error == "EOFError: EOF when reading a line"
    assert is_async.error == "TypeError: 'tool' is async: tools must be plain 'def' functions"
    assert (await sandbox.run(call(ADD, a=1, b=2))).value == 3


async def test_values_json_cannot_hold_come_back_as_strings(sandbox: ToolSandbox) -> None:
    source = '''
import datetime

class Point:
    def __str__(self) -> str:
        return "Point(1, 2)"

def tool():
    """Odd values."""
    return {"when": datetime.date(2024, 5, 1), "point": Point(), "pair": (1, 2), "lone": "\\ud800!"}
'''
    result = await sandbox.run(call(source))

    assert result.value == {"when": "2024-05-01", "point": "Point(1, 2)", "pair": [1, 2], "lone": "?!"}


async def test_arguments_json_cannot_hold_fail_the_call(sandbox: ToolSandbox) -> None:
    result = await sandbox.run(call(ADD, a=object(), b=1))

    assert not result.ok
    assert result.error is not None and result.error.startswith("arguments are not JSON-serializable")


async def test_timeout_fails_the_call_and_the_sandbox_goes_on(sandbox: ToolSandbox) -> None:
    sleeper = "import time\ndef tool():\n    time.sleep(30)\n"

    result = await sandbox.run(call(sleeper), timeout=0.3)

    assert not result.ok
    assert result.error == "timed out after 0.3 s"
    assert 300 <= result.duration_ms < 3000
    assert all(r.ok for r in await sandbox.run_many([call(ADD, a=1, b=2) for _ in range(4)]))


async def test_each_call_runs_under_its_limits(sandbox: ToolSandbox) -> None:
    source = """
import resource

def tool() -> dict:
    names = ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE")
    return {name: list(resource.getrlimit(getattr(resource, name))) for name in names}
"""
    result = await sandbox.run(call(source), timeout=2.5)

    mib = 1024 * 1024
    assert result.value == {
        "RLIMIT_CPU": [4, 4],  # the timeout, rounded up, and a second more
        "RLIMIT_AS": [256 * mib, 256 * mib],
        "RLIMIT_NPROC": [34, 34],  # 32, and the zygote and the call's own process
        "RLIMIT_NOFILE": [256, 256],
        "RLIMIT_FSIZE": [64 * mib, 64 * mib],
        "RLIMIT_CORE": [0, 0],
    }


async def test_a_call_that_exits_or_crashes_fails_alone(sandbox: ToolSandbox) -> None:
    exits = await sandbox.run(call("import os\ndef tool():\n    os._exit(3)\n"))
    crashes = await sandbox.run(call("import os, signal\ndef tool():\n    os.kill(os.getpid(), signal.SIGSEGV)\n"))

    assert exits.error == "the tool's process ended before answering (exit code 3)"
    assert crashes.error == "the tool's process ended before answering (SIGSEGV)"
    results = await sandbox.run_many([call(ADD, a=i, b=i) for i in range(10)])
    assert [r.value for r in results] == [2 * i for i in range(10)]


async def test_memory_limit(sandbox: ToolSandbox) -> None:
    source = '''
def tool() -> int:
    """Allocates 1 GB."""
    block = bytearray(1024 * 1024 * 1024)
    return len(block)
'''
    result = await sandbox.run(call(source))

    assert not result.ok
    assert result.error == "MemoryError"
    assert (await sandbox.run(call(ADD, a=1, b=2))).value == 3


async def test_file_size_and_open_files_are_limited() -> None:
    write = '''
def tool() -> str:
    """Writes 3 MB to a file."""
    with open("big", "wb") as file:
        file.write(b"x" * (3 * 1024 * 1024))
    return "written"
'''
    many_files = '''
def tool() -> int:
    """Opens files until it cannot."""
    files = []
    try:
        while True:
            files.append(open("/dev/null"))
    except OSError:
        return len(files)
'''
    limits = SandboxLimits(timeout=5.0, file_mb=2, open_files=40)
    async with ToolSandbox(BubblewrapLauncher(), limits=limits) as sandbox:
        too_big = await sandbox.run(call(write))
        opened = await sandbox.run(call(many_files))

    assert too_big.error == "OSError: [Errno 27] File too large"
    assert opened.ok and opened.value < 40


async def test_state_dies_with_the_call(sandbox: ToolSandbox) -> None:
    remembers = (
        SCRATCH_ENTRIES
        + "\ndef tool():\n    old = scratch_entries('.')\n    open('note', 'w').write('x')\n    return old\n"
    )

    counts = [(await sandbox.run(call(LEAK))).value for _ in range(5)]
    files = [(await sandbox.run(call(remembers))).value for _ in range(3)]

    assert counts == [1, 1, 1, 1, 1]
    assert files == [[], [], []]  # the scratch directory is wiped after every call


async def test_a_tool_compiled_once_serves_every_call_unchanged(sandbox: ToolSandbox) -> None:
    # The zygote compiles each tool once; a call that tampers with the compiled code, in its own
    # process, changes nothing for the next.
    tamper = """
import __main__

def tool() -> int:
    \"\"\"Empties the zygote's table of compiled tools and swaps this tool's constants.\"\"\"
    __main__._compiled.clear()
    tool.__code__ = (lambda: 0).__code__
    return 1
"""
    broken = "def tool(:\n"
    warns = "def tool(x: int) -> bool:\n    return x is 1\n"

    tampered = [(await sandbox.run(call(tamper))).value for _ in range(3)]
    added = [(await sandbox.run(call(ADD, a=i, b=1))).value for i in range(3)]
    errors = [(await sandbox.run(call(broken))).error for _ in range(2)]
    warned = [(await sandbox.run(call(warns, x=1))).stderr for _ in range(2)]

    assert tampered == [1, 1, 1]
    assert added == [1, 2, 3]
    assert errors[0] == errors[1] == "SyntaxError: invalid syntax (<tool>, line 1)"
    # What compiling prints reaches every call, as it would if each call compiled its tool.
    assert warned[0] == warned[1] == '<tool>:2: SyntaxWarning: "is" with a literal. Did you mean "=="?\n'


async def test_more_tools_than_a_zygote_keeps_compiled_still_run(sandbox: ToolSandbox) -> None:
    sources = [f"def tool(x: int) -> int:\n    return x + {n}\n" for n in range(80)]

    results = await sandbox.run_many([call(source, x=1000) for source in sources] * 2)

    assert [r.value for r in results] == [1000 + n for n in range(80)] * 2


async def test_a_call_killed_before_it_read_its_arguments_leaves_no_trace(sandbox: ToolSandbox) -> None:
    # The call's process reads its own arguments; killed at once, it leaves most of them unread,
    # which the zygote must not take for the next call.
    cut_short = await sandbox.run(call(ADD, a="x" * 4_000_000, b=""), timeout=0.000001)

    assert cut_short.error == "timed out after 1e-06 s"
    assert [(await sandbox.run(call(ADD, a=n, b=1))).value for n in range(3)] == [1, 2, 3]


async def test_secrets_reach_their_call_only(sandbox: ToolSandbox) -> None:
    source = "import os\ndef tool():\n    return os.environ.get('WEATHER_KEY')\n"

    first = await sandbox.run(call(source, env={"WEATHER_KEY": "k-123"}))
    second = await sandbox.run(call(source))

    assert first.value == "k-123"
    assert second.value is None


async def test_a_call_sees_the_sandbox_environment_and_its_secrets_only(sandbox: ToolSandbox) -> None:
    # The launcher starts the zygote with LD_BIND_NOW for its own start; no call inherits it.
    source = "import os\ndef tool():\n    return sorted(os.environ)\n"

    names = (await sandbox.run(call(source, env={"WEATHER_KEY": "k-123"}))).value

    assert set(names) - {"PWD"} == {"PATH", "HOME", "TMPDIR", "LANG", "WEATHER_KEY"}


async def test_run_many_keeps_input_order(sandbox: ToolSandbox) -> None:
    source = '''
import time

def tool(i: int) -> int:
    """Square, taking longer for some inputs so completions interleave."""
    if i % 7 == 0:
        time.sleep(0.002)
    return i * i
'''
    results = await sandbox.run_many([call(source, i=i) for i in range(100)])

    assert [r.value for r in results] == [i * i for i in range(100)]
    assert all(r.ok for r in results)


async def test_run_many_mixes_failures_into_their_places(sandbox: ToolSandbox) -> None:
    source = "def tool(i: int) -> int:\n    return 10 // i\n"

    results = await sandbox.run_many([call(source, i=i) for i in (1, 0, 2)])

    assert [(r.ok, r.value, r.error) for r in results] == [
        (True, 10, None),
        (False, None, "ZeroDivisionError: integer division or modulo by zero"),
        (True, 5, None),
    ]


async def test_organizations_never_share_a_zygote() -> None:
    zygote = "import os\ndef tool():\n    return os.getppid()\n"
    async with ToolSandbox(ProcessLauncher(), workers=1) as sandbox:
        first = await sandbox.run(call(zygote, org="org-a"))
        again = await sandbox.run(call(zygote, org="org-a"))
        other = await sandbox.run(call(zygote, org="org-b"))
        back = await sandbox.run(call(zygote, org="org-a"))

    assert first.value == again.value  # warm: the organization's zygote serves its next call
    assert other.value != first.value  # one slot: org-a's idle zygote made room for org-b's
    assert back.value not in (first.value, other.value)


async def test_a_zygote_that_dies_while_idle_is_replaced() -> None:
    zygote = "import os\ndef tool():\n    return os.getppid()\n"
    async with ToolSandbox(ProcessLauncher(), workers=1) as sandbox:
        pid = (await sandbox.run(call(zygote))).value
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would
        await asyncio.sleep(0.2)  # for the event loop to learn of the exit, as it would while idle

        result = await sandbox.run(call(zygote))

    assert result.ok, result.error
    assert result.value != pid


async def test_aclose_leaves_no_processes() -> None:
    source = '''
import os, subprocess, sys

def tool() -> list:
    """Starts a long-lived child and does not wait for it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    return [os.getppid(), child.pid]
'''
    sandbox = ToolSandbox(ProcessLauncher(), workers=2)
    await sandbox.start()
    results = await sandbox.run_many([call(source), call(source)])
    zygotes = {result.value[0] for result in results}
    children = [result.value[1] for result in results]
    await sandbox.aclose()
    await sandbox.aclose()  # twice is fine

    for pid in zygotes:  # reaped, not zombies
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for pid in children:  # killed with their call's process group, as the call ended
        assert await _ends(pid)
    with pytest.raises(ToolError, match="the tool sandbox is closed"):
        await sandbox.run(call(ADD, a=1, b=2))


@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_start_cut_off_while_bubblewrap_sets_up_leaves_nothing(tmp_path: Path, cancels: int) -> None:
    # As root the launcher writes the sandbox's id maps once bubblewrap reports its namespace; a
    # server that stops then (its run cancelled, and again as its loop ends) must leave no
    # process, pipe or uid behind: the start reaps bubblewrap before the cancellation goes on.
    silent = tmp_path / "bwrap"
    silent.write_text("#!/bin/sh\nexec sleep 60\n")  # a bubblewrap that never reports
    silent.chmod(0o755)
    uids = range(DEFAULT_UIDS.start + 4400, DEFAULT_UIDS.start + 4401)
    start = asyncio.create_task(BubblewrapLauncher(binary=str(silent), uids=uids).start(SandboxLimits()))
    waiting = await _child_running("sleep")
    its_pipes = {os.readlink(f"/proc/{waiting}/fd/{fd}") for fd in (0, 1, 2)}  # its stdin, stdout, stderr
    await _until_in(start, "_map_ids")  # started, and waiting for bubblewrap's report
    start.cancel()
    if cancels == 2:
        await _until_in(start, "_reap")  # bubblewrap killed, and being reaped (unless already done)
        start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start

    assert not os.path.exists(f"/proc/{waiting}")  # reaped, not a zombie
    assert not its_pipes & _open_files()  # this process holds no end of them
    async with ToolSandbox(BubblewrapLauncher(uids=uids), workers=1) as sandbox:  # its one uid is free
        assert (await sandbox.run(call(ADD, a=1, b=2))).value == 3


@pytest.mark.parametrize("cut_in", ["_spawn", "_map_ids"])
async def test_a_start_cut_off_before_the_namespace_is_up_leaves_no_bubblewrap(tmp_path: Path, cut_in: str) -> None:
    # Until bubblewrap's first process has set up the namespace, its second waits for it, holding
    # the zygote's pipes: a start cut off then (as it spawns, or as it waits for the report) must
    # end both, or the second outlives the server and the start's reap waits on its pipes in vain.
    binary = tmp_path / "bwrap"  # the real one, under a name this test alone starts it by
    binary.symlink_to(str(shutil.which("bwrap")))
    uids = range(DEFAULT_UIDS.start + 4402, DEFAULT_UIDS.start + 4403)
    start = asyncio.create_task(BubblewrapLauncher(binary=str(binary), uids=uids).start(SandboxLimits()))
    await _until_in(start, cut_in)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start

    assert _started_as(str(binary)) == []


async def test_a_sandbox_left_waiting_by_a_server_killed_as_it_started_is_ended_by_the_next_start(
    tmp_path: Path,
) -> None:
    # A server killed between bubblewrap's report and the id maps it writes (SIGKILL: no cleanup)
    # takes bubblewrap's first process with it, and leaves the second waiting forever for the
    # maps. Made here as it happens: a bubblewrap told to wait for maps nobody writes, whose first
    # process is then killed as its parent's death would kill it.
    binary = tmp_path / "bwrap"  # the real one, under a name this test alone starts it by
    binary.symlink_to(str(shutil.which("bwrap")))
    launcher = BubblewrapLauncher(binary=str(binary), uids=range(DEFAULT_UIDS.start + 4404, DEFAULT_UIDS.start + 4406))
    live = await launcher.start(SandboxLimits())
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    first = subprocess.Popen(
        [str(binary), "--unshare-all", "--unshare-user", "--die-with-parent", "--as-pid-1",
         "--userns-block-fd", str(block_r), "--info-fd", str(info_w), "--ro-bind", "/", "/",
         sys.executable, ZYGOTE_TARGET],
        pass_fds=(block_r, info_w),
    )  # fmt: skip
    os.close(info_w)
    try:
        second = json.loads(await asyncio.to_thread(_read_all, info_r))["child-pid"]
        first.kill()
        first.wait()
        assert _parent(second) not in (None, first.pid)  # left to init, waiting
        later = await launcher.start(SandboxLimits())

        for _ in range(500):
            if _parent(second) is None:
                break
            await asyncio.sleep(0.01)
        assert _parent(second) is None  # ended (and reaped by init)
        for started in (live, later):
            assert started.process.returncode is None  # the live zygotes are left alone
            launcher.kill(started)
            await started.process.wait()
    finally:
        for fd in (info_r, block_r, block_w):
            os.close(fd)


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    return data


def _parent(pid: int) -> int | None:
    """The parent of live process ``pid``; None once it has ended."""
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            return int(fields[1])
    return None


def _started_as(program: str) -> list[int]:
    """The live processes whose command line starts with ``program``."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0] == program.encode():
                found.append(int(entry))
    return found


async def _until_in(task: asyncio.Task[object], name: str) -> None:
    """Wait until ``task`` waits inside the coroutine function ``name``, or has ended (five seconds
    at most)."""
    deadline = asyncio.get_running_loop().time() + 5.0
    while not task.done() and asyncio.get_running_loop().time() < deadline:
        awaited: object = task.get_coro()
        while awaited is not None and hasattr(awaited, "cr_code"):
            if awaited.cr_code.co_name == name:
                return
            awaited = getattr(awaited, "cr_await", None)
        await asyncio.sleep(0)
    assert task.done(), f"the task never waited in {name}"


def _open_files() -> set[str]:
    """What this process's descriptors point to (``pipe:[inode]`` for a pipe)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
    return found


async def _child_running(name: str) -> int:
    """The pid of this process's child ``name`` once it runs (within five seconds)."""
    for _ in range(500):
        for entry in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                comm, rest = stat[stat.index("(") + 1 :].rsplit(")", 1)
                if comm == name and int(rest.split()[1]) == os.getpid():
                    return int(entry)
        await asyncio.sleep(0.01)
    raise AssertionError(f"no child {name!r} started")


async def test_a_missing_bubblewrap_refuses_custom_tools_and_says_what_to_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="nightshift.tools.sandbox"):
        async with ToolSandbox(BubblewrapLauncher(binary="bwrap-not-installed")) as sandbox:
            result = await sandbox.run(call(ADD, a=1, b=2))

    assert not result.ok
    assert result.error == (
        "custom tools cannot run on this server: the tool sandbox needs bubblewrap, and 'bwrap-not-installed' "
        "was not found (install it: apt-get install bubblewrap)"
    )
    assert sandbox.unavailable is not None
    assert "custom tools will not run: the tool sandbox needs bubblewrap" in caplog.text


async def test_process_mode_is_an_opt_in_that_warns(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(tool_sandbox=SandboxKind.PROCESS, tool_bwrap="bwrap-not-installed")
    with caplog.at_level(logging.WARNING, logger="nightshift.tools.sandbox"):
        async with build_sandbox(settings) as sandbox:
            result = await sandbox.run(call(ADD, a=1, b=2))

    assert result.value == 3
    assert sandbox.kind is SandboxKind.PROCESS
    assert "NIGHTSHIFT_TOOL_SANDBOX=process: custom tools run as plain processes" in caplog.text
    assert "no isolation" in caplog.text


async def _ends(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie within a second (init reaps it in its own time)."""
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        await asyncio.sleep(0.01)
    return False


# Which zygote ran a call: in bubblewrap every zygote is pid 1 of a pid namespace of its own; as a
# plain process it is the call's parent.
WHICH_ZYGOTE = """
import os

def zygote() -> str:
    return f"{os.readlink('/proc/self/ns/pid')} {os.getppid()}"
"""


async def test_a_tree_the_tool_made_unremovable_is_removed_and_the_zygote_goes_on() -> None:
    # Bubblewrap only: there the zygote and the tool are the unprivileged sandbox uid, for which
    # mode 000 means what it says (as plain processes of this root test run, nothing is locked).
    locks = (
        WHICH_ZYGOTE
        + '''
def tool() -> str:
    """Leaves trees it can neither read nor write in /tmp and /dev/shm."""
    for top in ("/tmp/locked", "/tmp/deep", "/dev/shm/locked"):
        os.makedirs(f"{top}/inner/more")
        for name in ("a", "b"):
            with open(f"{top}/inner/{name}", "w") as file:
                file.write("x")
    os.chmod("/tmp/deep/inner/more", 0)
    os.chmod("/tmp/deep/inner", 0o500)  # no writing: its entries cannot be removed
    os.chmod("/tmp/deep", 0o600)  # no searching: its entries cannot be looked at
    for top in ("/tmp/locked", "/dev/shm/locked"):
        os.chmod(f"{top}/inner", 0)
        os.chmod(top, 0)
    return zygote()
'''
    )
    looks = (
        WHICH_ZYGOTE
        + SCRATCH_ENTRIES
        + "\ndef tool() -> list:\n    return [zygote(), scratch_entries('/tmp'), scratch_entries('/dev/shm')]\n"
    )
    async with ToolSandbox(BubblewrapLauncher(), workers=1) as sandbox:
        first = await sandbox.run(call(locks))
        second = await sandbox.run(call(looks))

    assert first.ok, first.error
    assert second.ok, second.error
    assert second.value == [first.value, [], []]  # the same zygote, with nothing of the call left


# A list of small records: the shape that costs most to decode per byte. 60 MB stays under the
# 64 MiB that zygotes used to let through, so the old server read and decoded it all on its loop.
RECORDS = (
    WHICH_ZYGOTE
    + '''
def tool(megabytes: float) -> dict:
    """About ``megabytes`` MB of JSON: records of 10 bytes each ('{"k": 1}, ')."""
    return {"zygote": zygote(), "records": [{"k": 1}] * int(megabytes * 100_000)}
'''
)


async def test_a_huge_answer_fails_alone_and_a_large_one_does_not_hold_the_event_loop() -> None:
    gaps: list[float] = []

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            gaps.append(now - last)
            last = now

    limits = SandboxLimits(timeout=20.0, memory_mb=2048)
    async with ToolSandbox(BubblewrapLauncher(), workers=1, limits=limits) as sandbox:
        before = await sandbox.run(call(WHICH_ZYGOTE + "\ndef tool() -> str:\n    return zygote()\n"))
        ticker = asyncio.create_task(tick())
        huge = await sandbox.run(call(RECORDS, megabytes=60))
        large = await sandbox.run(call(RECORDS, megabytes=3))
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker

    assert not huge.ok
    assert huge.error == "the tool's answer is longer than 4194304 bytes"
    assert large.ok, large.error
    assert large.value == {"zygote": before.value, "records": [{"k": 1}] * 300_000}  # whole, from the same zygote
    # What the bound leaves to read and decode takes a few ms at a time; reading and decoding the
    # whole answer on the loop held it for seconds. The bound leaves room for a loaded 2-core
    # machine, where another process may take the CPU from this one for a few hundred ms.
    assert max(gaps) < 0.5, sorted(gaps)[-5:]


async def test_printed_output_is_cut_to_what_a_tool_message_keeps(sandbox: ToolSandbox) -> None:
    source = """
import sys

def tool() -> int:
    sys.stdout.write("x" * 100_002)
    sys.stderr.write("y" * 100_001)
    return 1
"""
    result = await sandbox.run(call(source))

    assert result.ok, result.error
    assert result.stdout == "x" * 100_000 + "\n[... 2 more characters cut]"
    assert result.stderr == "y" * 100_000 + "\n[... 1 more characters cut]"


def test_the_server_reads_every_answer_the_zygote_may_send() -> None:
    # The zygote is a script the server does not import; its bound and the server's must agree.
    assert _zygote.ANSWER_LIMIT + 1024 <= ANSWER_BYTES <= 2 * _zygote.ANSWER_LIMIT
