"""The tool sandbox's zygote: a warm process that forks one fresh child per tool call.

Started by :mod:`nightshift.tools.launch` as a script (``python -I -B _zygote.py``), inside
bubblewrap's namespaces (``--isolated``) or as a plain process. It imports nothing from
nightshift and serves ONE organization. Per call it forks a child, which reads the call itself,
lowers its own limits, runs the tool and sends its answer back through a pipe; then the zygote
kills every process the call left, wipes the scratch directories and answers the server. A tool
can change nothing that outlives its call: not the zygote (which never runs tool code, never
sees a call's arguments or secrets, and is not dumpable), not the next call's process.

Protocol, newline-delimited JSON on the zygote's ORIGINAL stdin/stdout (moved aside at start):
    zygote -> server, once:     ``{"ready": true}``
    server -> child, per call:  ``{"timeout", "env", "call": {"source_code", "function_name", "arguments"}}``
    zygote -> server, per call: ``{"ok", "value", "error", "stdout", "stderr"}``

With ``--isolated`` the zygote is pid 1 of its own pid namespace: it drops to the unprivileged
uid, kills every other process of the namespace after each call (``kill(-1)``), watches the
memory of all the call's processes together, and exits (so that the server starts a fresh
sandbox) whenever it cannot prove the namespace clean. Without it (``NIGHTSHIFT_TOOL_SANDBOX=process``)
it kills the call's process group, which a tool can leave; that mode isolates nothing.

The zygote exits when its request stream reaches end of file.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import io
import json
import math
import os
import resource
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

SANDBOX_UID = 1000
# The longest answer a call may send; a longer one fails the call.
ANSWER_LIMIT = 64 * 1024 * 1024
# Captured tool output is cut to this many characters per stream.
OUTPUT_LIMIT = 1_000_000
# The memory of a call's processes is first measured this long after it starts, then this often:
# most calls end sooner and are never measured.
WATCH_INTERVAL = 0.02
_TOOL_MODULE_NAME = "nightshift_tool"
_MIB = 1024 * 1024
_PR_SET_PDEATHSIG = 1


@dataclass(slots=True)
class Options:
    """The command line: ``--isolated``, ``--scratch=DIR`` (repeated) and the per-call limits."""

    isolated: bool = False  # pid 1 of a bubblewrap sandbox
    scratch: list[str] = field(default_factory=list)  # directories wiped after every call
    memory_mb: int = 512
    processes: int = 32
    open_files: int = 256
    file_mb: int = 64

    @classmethod
    def parse(cls, argv: list[str]) -> Options:
        # No argparse: every module the zygote imports makes each fork a little dearer.
        options = cls()
        for argument in argv:
            name, _, value = argument.removeprefix("--").partition("=")
            name = name.replace("-", "_")
            if name == "isolated":
                options.isolated = True
            elif name == "scratch":
                options.scratch.append(value)
            elif name in ("memory_mb", "processes", "open_files", "file_mb"):
                setattr(options, name, int(value))
            else:
                raise SystemExit(f"nightshift-tool-zygote: unknown argument {argument!r}")
        return options


def main(argv: list[str] | None = None) -> int:
    """Serve calls until the server closes the request stream."""
    options = Options.parse(sys.argv[1:] if argv is None else argv)
    # compile() is slow the first time in a process (about 3 ms): pay it once, here.
    compile("def warm(a):\n    return a\n", "<warm>", "exec")
    if options.isolated:
        # bwrap kept CAP_SETUID/CAP_SETGID for this one step; setresuid to a non-zero uid drops
        # every capability, and the zygote becomes undumpable: tools (the same uid) cannot
        # ptrace it or read its memory.
        os.setgroups([])
        os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        # Changing uid cleared the death signal bubblewrap set (--die-with-parent): set it again.
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # As pid 1 a signal without a handler is ignored: tools cannot interrupt the zygote.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    requests, responses = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # raw writes to fd 1 by tools land in stderr, which the server drains
    _send(responses, b'{"ready": true}')
    while True:
        answer, clean = _serve_one(requests, responses, options)
        if answer is None:
            return 0
        _send(responses, answer)
        if not clean:
            return 0  # the server starts a fresh sandbox for the next call


def _send(fd: int, line: bytes) -> None:
    view = memoryview(line + b"\n")
    while view:
        view = view[os.write(fd, view) :]


def _serve_one(requests: int, responses: int, options: Options) -> tuple[bytes | None, bool]:
    """Fork a child for the next call and supervise it; None when no call will come."""
    started_r, started_w = os.pipe()
    result_r, result_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(started_r)
        os.close(result_r)
        code = 70
        try:
            code = _child(requests, responses, started_w, result_w, options)
        finally:
            os._exit(code)
    os.close(started_w)
    os.close(result_w)
    try:
        header = _read_to_end(started_r, 64)
        if not header:
            status = _reap(pid, options)
            if os.waitstatus_to_exitcode(status) == 0:
                return None, True  # the request stream ended
            return _failure(f"the call could not start ({_describe_status(status)})"), False
        answer = _supervise(pid, result_r, requests, float(header), options)
    finally:
        os.close(started_r)
        os.close(result_r)
    return answer, _clean_up(options)


def _supervise(pid: int, result_r: int, requests: int, timeout: float, options: Options) -> bytes:
    """Wait for the call's answer within its limits, then make sure every process of it is gone."""
    data = bytearray()
    reason: str | None = None
    start = time.monotonic()
    deadline, next_watch = start + timeout, start + WATCH_INTERVAL
    pidfd = os.pidfd_open(pid)
    poll = select.poll()
    poll.register(result_r, select.POLLIN)
    poll.register(pidfd, select.POLLIN)
    poll.register(requests, 0)  # only its hang-up: the server is gone (or gave up on this sandbox)
    reading = True
    try:
        while reason is None:
            now = time.monotonic()
            if now >= deadline:
                reason = f"timed out after {timeout} s"
                break
            wait = min(deadline, next_watch) - now if options.isolated else deadline - now
            events = dict(poll.poll(max(wait, 0) * 1000))
            if result_r in events:
                chunk = os.read(result_r, 1 << 16)
                if not chunk:
                    poll.unregister(result_r)
                    reading = False
                data += chunk
                if len(data) > ANSWER_LIMIT:
                    reason = f"the tool's answer is longer than {ANSWER_LIMIT} bytes"
            if requests in events:
                _kill_call(pid, options)
                raise SystemExit(0)
            if pidfd in events:
                break
            if options.isolated and time.monotonic() >= next_watch:
                next_watch += WATCH_INTERVAL
                if _namespace_memory() > options.memory_mb * _MIB:
                    reason = f"the tool used more than {options.memory_mb} MB of memory (all its processes together)"
    finally:
        os.close(pidfd)
    _kill_call(pid, options)
    if reason is None and reading:
        # Every writer is dead now, so the rest of the answer ends at end of file.
        while chunk := os.read(result_r, 1 << 16):
            data += chunk
            if len(data) > ANSWER_LIMIT:
                reason = f"the tool's answer is longer than {ANSWER_LIMIT} bytes"
                break
    status = _reap(pid, options)
    if reason is not None:
        return _failure(reason)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL) and not data:
        return _failure(f"the tool was killed ({_describe_status(status)}; CPU time limit {math.ceil(timeout)} s)")
    if not data or os.waitstatus_to_exitcode(status) != 0:
        return _failure(f"the tool's process ended before answering ({_describe_status(status)})")
    if b"\n" in data:
        return _failure("the tool wrote into its answer channel")
    return bytes(data)


def _namespace_memory() -> int:
    """Resident anonymous and shared memory of every process in the namespace but the zygote.

    Pages a forked process still shares with its parent count in both, so this errs high.
    """
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as status:
                for line in status:
                    if line.startswith((b"RssAnon:", b"RssShmem:")):
                        total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue  # it ended meanwhile
    return total


def _kill_call(pid: int, options: Options) -> None:
    """SIGKILL every process the call started, wherever it went."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if options.isolated:
            os.kill(-1, signal.SIGKILL)  # from pid 1: every other process of the namespace
        else:
            os.killpg(pid, signal.SIGKILL)


def _reap(pid: int, options: Options) -> int:
    """Wait for the call's process (and, as pid 1, for every orphan); its wait status."""
    status = 0
    if not options.isolated:
        _, status = os.waitpid(pid, 0)
        return status
    while True:
        try:
            done, code = os.waitpid(-1, 0)
        except ChildProcessError:
            return status
        if done == pid:
            status = code


def _clean_up(options: Options) -> bool:
    """Leave nothing of the call behind; False when that cannot be made sure of."""
    clean = True
    for scratch in options.scratch:
        for entry in os.scandir(scratch):
            try:
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path)
                else:
                    os.unlink(entry.path)
            except OSError:
                clean = False
    if options.isolated:
        # System V IPC objects outlive processes; the namespace is cheaper to replace than to scrub.
        for kind in ("shm", "sem", "msg"):
            with contextlib.suppress(OSError), open(f"/proc/sysvipc/{kind}", "rb") as table:
                if len(table.read().splitlines()) > 1:
                    clean = False
    return clean


def _remove_tree(path: str) -> None:
    import shutil  # only when a tool left a directory: kept out of the zygote's heap until then

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=_make_removable)
    else:
        shutil.rmtree(path, onerror=_make_removable)


def _make_removable(function: Any, path: str, _exc: object) -> None:
    """A directory a tool made unreadable: give it back to its owner (the sandbox uid) and retry."""
    os.chmod(os.path.dirname(path), 0o700)
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    function(path)


def _child(requests: int, responses: int, started_w: int, result_w: int, options: Options) -> int:
    """One call, in a fresh process: read it, lower the limits, run the tool, answer."""
    os.setpgid(0, 0)  # its own process group, which the zygote kills after the call
    os.close(responses)
    with open(requests, "rb", closefd=True) as stream:
        line = stream.readline()
    if not line:
        return 0
    try:
        request = json.loads(line)
        timeout = float(request["timeout"])
        env: dict[str, str] = request["env"]
        call = request["call"]
        source_code: str = call["source_code"]
        function_name: str = call["function_name"]
        arguments: dict[str, Any] = call["arguments"]
    except (ValueError, KeyError, TypeError) as exc:
        os.write(started_w, b"5")
        _send_answer(result_w, _failure_dict(f"bad request: {exc}", "", ""))
        return 0
    _limit(options, timeout)
    os.write(started_w, repr(timeout).encode())
    os.close(started_w)
    if env:  # the agent's secrets, most often none: updating os.environ costs a fresh process ~50 page faults
        os.environ.update(env)
    if options.scratch:
        os.chdir(options.scratch[0])
    _send_answer(result_w, _run(source_code, function_name, arguments))
    return 0


def _limit(options: Options, timeout: float) -> None:
    cpu = math.ceil(timeout) + 1
    memory = options.memory_mb * _MIB
    files = options.file_mb * _MIB
    # In the sandbox the process count covers the zygote and this process too: every process of
    # the sandbox's user namespace runs as the one sandbox uid.
    processes = options.processes + 2
    for limit, value in (
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_NOFILE, options.open_files),
        (resource.RLIMIT_FSIZE, files),
    ):
        if value > 0:  # 0: no limit of this kind
            resource.setrlimit(limit, (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _send_answer(fd: int, answer: dict[str, Any]) -> None:
    view = memoryview(_encode(answer))
    with contextlib.suppress(OSError):  # the zygote gave up on this call
        while view:
            view = view[os.write(fd, view) :]


def _run(source_code: str, function_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            value = _call(source_code, function_name, arguments)
    except BaseException as exc:  # sys.exit() in a tool is the tool's failure
        return _failure_dict(_describe(exc), stdout.getvalue(), stderr.getvalue())
    return {
        "ok": True,
        "value": value,
        "error": None,
        "stdout": _cut(stdout.getvalue()),
        "stderr": _cut(stderr.getvalue()),
    }


def _call(source_code: str, function_name: str, arguments: dict[str, Any]) -> Any:
    namespace: dict[str, Any] = {"__name__": _TOOL_MODULE_NAME, "__builtins__": builtins}
    exec(compile(source_code, "<tool>", "exec"), namespace)
    function = namespace.get(function_name)
    if not callable(function):
        raise NameError(f"source_code defines no function {function_name!r}")
    value = function(**arguments)
    if hasattr(value, "__await__"):
        if hasattr(value, "close"):
            value.close()  # never awaited on purpose; closing avoids a "never awaited" warning
        raise TypeError(f"{function_name!r} is async: tools must be plain 'def' functions")
    return value


def _encode(message: dict[str, Any]) -> bytes:
    """One answer line; values JSON cannot hold are sent as their ``str()``."""
    try:
        return _dumps(message)
    except Exception:  # a value that contains itself, or whose __str__ raises
        pass
    try:
        fallback = {**message, "value": str(message.get("value"))}
    except Exception as exc:
        fallback = _failure_dict(f"return value cannot be sent: {_describe(exc)}", "", "")
    return _dumps(fallback)


def _dumps(message: dict[str, Any]) -> bytes:
    # Control characters are escaped, so the answer is one line; a lone surrogate becomes "?".
    return json.dumps(message, default=str, ensure_ascii=False).encode("utf-8", "replace")


def _failure(error: str) -> bytes:
    return _encode(_failure_dict(error, "", ""))


def _failure_dict(error: str, stdout: str, stderr: str) -> dict[str, Any]:
    return {"ok": False, "value": None, "error": error, "stdout": _cut(stdout), "stderr": _cut(stderr)}


def _read_to_end(fd: int, limit: int) -> bytes:
    data = b""
    while chunk := os.read(fd, limit):
        data += chunk
        if len(data) >= limit:
            break
    return data


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _cut(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    return text[:OUTPUT_LIMIT] + f"\n[... {len(text) - OUTPUT_LIMIT} more characters cut]"


if __name__ == "__main__":
    sys.exit(main())
