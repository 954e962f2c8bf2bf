"""The process sandbox, with real worker processes: results, failures, limits, isolation, recycling."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import pytest

from nightshift.errors import ToolError
from nightshift.tools.sandbox import ProcessSandbox, SandboxCall


def _call(source: str, function_name: str = "tool", **arguments: object) -> SandboxCall:
    return SandboxCall(source_code=source, function_name=function_name, arguments=arguments)


ADD = '''
def tool(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''

PID = '''
import os

def tool() -> int:
    """The worker's process id."""
    return os.getpid()
'''


@pytest.fixture
async def sandbox() -> AsyncIterator[ProcessSandbox]:
    async with ProcessSandbox(workers=2, timeout=5.0, memory_limit_mb=256) as sandbox:
        yield sandbox


async def test_returns_the_value(sandbox: ProcessSandbox) -> None:
    result = await sandbox.run(_call(ADD, a=2, b=3))

    assert result.ok
    assert result.value == 5
    assert result.error is None
    assert result.duration_ms > 0


async def test_prints_come_back_without_breaking_the_protocol(sandbox: ProcessSandbox) -> None:
    source = '''
import os
import sys

def tool(name: str) -> dict:
    """Chatty."""
    print("hello", name)
    print('{"id": 999, "ok": true}')  # looks like a protocol line: must stay tool output
    print("warning!", file=sys.stderr)
    os.write(1, b"raw bytes to fd 1\\n")  # below sys.stdout: must not reach the protocol either
    return {"greeting": f"hi {name}", "n": [1, 2.5, None, True]}
'''
    result = await sandbox.run(_call(source, name="ada"))

    assert result.ok, result.error
    assert result.value == {"greeting": "hi ada", "n": [1, 2.5, None, True]}
    assert result.stdout == 'hello ada\n{"id": 999, "ok": true}\n'
    assert result.stderr == "warning!\n"
    # The worker is still in step for the next call.
    assert (await sandbox.run(_call(ADD, a=1, b=1))).value == 2


async def test_an_exception_becomes_the_error(sandbox: ProcessSandbox) -> None:
    source = '''
def tool(x: int) -> int:
    """Fails."""
    print("before")
    raise ValueError(f"bad x: {x}")
'''
    result = await sandbox.run(_call(source, x=7))

    assert not result.ok
    assert result.value is None
    assert result.error == "ValueError: bad x: 7"
    assert result.stdout == "before\n"


async def test_bad_calls_are_errors_not_crashes(sandbox: ProcessSandbox) -> None:
    wrong_argument = await sandbox.run(_call(ADD, a=1, c=2))
    missing_function = await sandbox.run(_call(ADD, "nope"))
    syntax_error = await sandbox.run(_call("def tool(:\n", a=1))
    exits = await sandbox.run(_call("import sys\ndef tool():\n    sys.exit(4)\n"))
    reads_stdin = await sandbox.run(_call("def tool():\n    return input()\n"))

    assert wrong_argument.error == "TypeError: tool() got an unexpected keyword argument 'c'"
    assert missing_function.error == "NameError: source_code defines no function 'nope'"
    assert syntax_error.error is not None and syntax_error.error.startswith("SyntaxError: ")
    assert exits.error == "SystemExit: 4"
    # Tools cannot read the request stream: their stdin is empty.
    assert reads_stdin.error == "EOFError: EOF when reading a line"
    assert (await sandbox.run(_call(ADD, a=1, b=2))).value == 3


async def test_values_json_cannot_hold_come_back_as_strings(sandbox: ProcessSandbox) -> None:
    source = '''
import datetime

class Point:
    def __str__(self) -> str:
        return "Point(1, 2)"

def tool():
    """Odd values."""
    return {"when": datetime.date(2024, 5, 1), "point": Point(), "pair": (1, 2)}
'''
    result = await sandbox.run(_call(source))

    assert result.value == {"when": "2024-05-01", "point": "Point(1, 2)", "pair": [1, 2]}


async def test_timeout_kills_the_worker_and_the_pool_goes_on(sandbox: ProcessSandbox) -> None:
    sleeper = "import time\ndef tool():\n    time.sleep(30)\n"
    before = {(await sandbox.run(_call(PID))).value for _ in range(4)}

    result = await sandbox.run(_call(sleeper), timeout=0.3)

    assert not result.ok
    assert result.error == "timed out after 0.3 s"
    assert 300 <= result.duration_ms < 3000
    after = [await sandbox.run(_call(PID)) for _ in range(4)]
    assert all(r.ok for r in after)
    assert {r.value for r in after} != before  # one of the two workers is new


async def test_a_worker_that_exits_is_replaced(sandbox: ProcessSandbox) -> None:
    result = await sandbox.run(_call("import os\ndef tool():\n    os._exit(3)\n"))

    assert not result.ok
    assert result.error == "worker died (exit code 3)"
    results = await sandbox.run_many([_call(ADD, a=i, b=i) for i in range(10)])
    assert [r.value for r in results] == [2 * i for i in range(10)]


async def test_a_worker_killed_by_a_signal_is_replaced(sandbox: ProcessSandbox) -> None:
    source = "import os, signal\ndef tool():\n    os.kill(os.getpid(), signal.SIGSEGV)\n"

    result = await sandbox.run(_call(source))

    assert result.error == "worker died (exit code -11)"
    assert "Segmentation fault" in result.stderr  # faulthandler's report from the dead worker
    assert (await sandbox.run(_call(ADD, a=2, b=2))).value == 4


async def test_a_worker_that_dies_while_idle_is_replaced_before_the_next_call() -> None:
    async with ProcessSandbox(workers=1) as sandbox:
        pid = (await sandbox.run(_call(PID))).value
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would
        while _running(pid):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # for the event loop to learn of the exit, as it would while idle

        result = await sandbox.run(_call(PID))

    assert result.ok, result.error
    assert result.value != pid


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_memory_limit(sandbox: ProcessSandbox) -> None:
    source = '''
def tool() -> int:
    """Allocates 1 GB."""
    block = bytearray(1024 * 1024 * 1024)
    return len(block)
'''
    result = await sandbox.run(_call(source))

    assert not result.ok
    assert result.error == "MemoryError"
    assert (await sandbox.run(_call(ADD, a=1, b=2))).value == 3


async def test_no_server_secrets_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("NIGHTSHIFT_SERVER_PASSWORD", "hunter2-password")
    source = '''
import os

def tool() -> dict:
    """The environment and working directory the tool sees."""
    return {"env": dict(os.environ), "cwd": os.getcwd()}
'''
    async with ProcessSandbox(workers=1) as sandbox:
        result = await sandbox.run(_call(source))

    assert result.ok, result.error
    seen = str(result.value)
    for leaked in ("ANTHROPIC_API_KEY", "sk-secret", "NIGHTSHIFT_SERVER_PASSWORD", "hunter2-password"):
        assert leaked not in seen
    env = result.value["env"]
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_CTYPE"}
    assert result.value["cwd"] == env["HOME"] != os.getcwd()


async def test_run_many_keeps_input_order(sandbox: ProcessSandbox) -> None:
    source = '''
import time

def tool(i: int) -> int:
    """Square, taking longer for some inputs so completions interleave."""
    if i % 7 == 0:
        time.sleep(0.002)
    return i * i
'''
    results = await sandbox.run_many([_call(source, i=i) for i in range(500)])

    assert [r.value for r in results] == [i * i for i in range(500)]
    assert all(r.ok for r in results)


async def test_run_many_mixes_failures_into_their_places(sandbox: ProcessSandbox) -> None:
    source = "def tool(i: int) -> int:\n    return 10 // i\n"

    results = await sandbox.run_many([_call(source, i=i) for i in (1, 0, 2)])

    assert [(r.ok, r.value, r.error) for r in results] == [
        (True, 10, None),
        (False, None, "ZeroDivisionError: integer division or modulo by zero"),
        (True, 5, None),
    ]


async def test_workers_are_recycled_after_max_calls() -> None:
    leak = '''
import sys

def tool() -> int:
    """Counts calls in state that outlives the call (a module attribute)."""
    sys.leaked = getattr(sys, "leaked", 0) + 1
    return sys.leaked
'''
    async with ProcessSandbox(workers=1, max_calls_per_worker=3) as sandbox:
        counts = [(await sandbox.run(_call(leak))).value for _ in range(7)]
        pids = [(await sandbox.run(_call(PID))).value for _ in range(3)]

    assert counts == [1, 2, 3, 1, 2, 3, 1]
    assert len(set(pids)) == 2  # the 9th call ended a worker's life, the 10th ran on a fresh one


async def test_aclose_leaves_no_processes() -> None:
    source = '''
import os, subprocess, sys

def tool() -> list:
    """Starts a long-lived child, so closing must end it too."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    return [os.getpid(), child.pid]
'''
    sandbox = ProcessSandbox(workers=2)
    results = await sandbox.run_many([_call(source), _call(source)])
    pids = [pid for result in results for pid in result.value]
    await sandbox.aclose()
    await sandbox.aclose()  # twice is fine

    for pid in pids[::2]:  # the workers are reaped, not zombies
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for pid in pids[1::2]:  # the tools' children were killed with their worker's process group
        assert await _ends(pid)
    with pytest.raises(ToolError, match="the tool sandbox is closed"):
        await sandbox.run(_call(ADD, a=1, b=2))


async def _ends(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie within a second.

    The tool's child was reparented to init (or a subreaper), which reaps it in its own time.
    """
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        await asyncio.sleep(0.01)
    return False
