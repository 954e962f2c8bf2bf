"""The tool sandbox's zygote: a warm process that forks one fresh child per tool call.

Started by :mod:`nightshift.tools.launch` as a script (``python -I -B _zygote.py``), inside
bubblewrap's namespaces (``--isolated``) or as a plain process. It imports nothing from
nightshift and serves ONE organization. Per call it forks a child, which reads the call itself,
lowers its own limits, runs the tool and sends its answer back through a pipe; then the zygote
kills every process the call left, wipes the scratch directories and answers the server. A tool
can change nothing that outlives its call: not the zygote (which never runs tool code, never
sees a call's arguments or secrets, and is not dumpable), not the next call's process.

Protocol, on the zygote's ORIGINAL stdin/stdout (moved aside at start). The server sends frames,
each a 13-byte header (:data:`HEADER`: kind, body length, timeout) and a body; the zygote answers
with newline-delimited JSON:
    zygote -> server, once:      ``{"ready": true}``
    server -> zygote, per tool:  ``S`` frame, body ``marshal((number, source_code))``: the zygote
                                 compiles the source once, for every later call of it
    server -> child, per call:   ``C`` frame, body ``marshal((env, code, function_name, arguments))``,
                                 ``code`` the number of a compiled source or the source itself
    zygote -> server, per call:  ``=`` (it serves the next call) or ``!`` (it exits now: the server
                                 starts a fresh sandbox), then ``{"ok", "value", "error", "stdout", "stderr"}``

The zygote reads a call's header (its timeout) but never its body: the child reads that itself,
so the arguments and secrets of a call never enter the zygote, whose memory every later call
inherits. The sources it compiles are the organization's own tools.

With ``--isolated`` the zygote is pid 1 of its own pid namespace: it drops to the unprivileged
uid, leaves the session keyring it inherited (the server's) for an anonymous one (and for a new
one before each call, which the call's process starts in), kills every
other process of the namespace after each call (``kill(-1)``), watches the memory of all the
call's processes, of the files it keeps in the scratch tmpfs and (``--own-network``: the network
namespace is the sandbox's own) of its sockets' buffers together, and exits (so that the server
starts a fresh sandbox) whenever it cannot prove the namespace clean. The sandbox's syscall filter
keeps memory from hiding where none of these shows it (memfd, System V memory, nested mounts) and
keeps calls from leaving keys or message queues behind. ``--keep=PATH`` names what the wipe of the
scratch directories leaves: the Python runtime, when it lives under ``/tmp``.

Without ``--isolated`` (``NIGHTSHIFT_TOOL_SANDBOX=process``) it kills the call's process group,
which a tool can leave; that mode isolates nothing.

The zygote exits when its request stream reaches end of file.

It imports as little as it can: every module in its heap makes each fork, and each page a call
touches, dearer (a fresh process pays a page fault for every page it writes, and so does the
zygote, whose pages each fork shares again). For the same reason what runs at every call (its
loop, the call's process) works out nothing twice and uses ``try``/``except`` where
``contextlib.suppress`` would run two more Python functions. It is one file for the same reason:
its memory watch moved to a module beside it, loaded from its own folder, made every call write
more pages of the zygote's, with nothing else changed.
"""

from __future__ import annotations

import _json
import _socket
import builtins
import contextlib
import ctypes
import functools
import io
import marshal
import math
import os
import resource
import select
import signal
import struct
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing stays out of the zygote's heap
    from typing import Any

SANDBOX_UID = 1000
# The longest answer a call may send; a longer one fails the call (the zygote goes on). A result
# is cut to its tool's return_char_limit, at most 1,000,000 characters, so this holds the longest
# result a tool can keep (up to 3 bytes a character in UTF-8: any text of the Basic Multilingual
# Plane) with both outputs, and keeps what the server reads and decodes per call small.
ANSWER_LIMIT = 4 * 1024 * 1024
# Captured tool output is cut to this many characters per stream: it is kept with the tool's
# message, next to a result whose default limit is 50,000 characters.
OUTPUT_LIMIT = 100_000
# The memory of a call's processes is first measured this long after it starts, then this often:
# most calls end sooner and are never measured.
WATCH_INTERVAL = 0.02
_TOOL_MODULE_NAME = "nightshift_tool"
_MIB = 1024 * 1024
# Signals a call's processes may have queued at once, all together.
_SIGNALS_PENDING = 64
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
# keyctl's syscall number, by machine, and its operation that makes the caller join a new anonymous
# session keyring (the only one the sandbox's syscall filter lets through).
_KEYCTL = {"x86_64": 250, "aarch64": 219}
_KEYCTL_JOIN_SESSION_KEYRING = 1
# A frame's header: its kind (b"S" a source, b"C" a call), the body's length in bytes, and the
# call's timeout in seconds (0 in a source frame).
HEADER = struct.Struct("<cId")
# What a call's process writes first on its answer pipe once it has read all of its call, so that
# the zygote knows where the next frame starts.
_READ_MARK = b"+"
# What precedes each answer: whether this zygote serves the next call or exits after this one.
_GOES_ON, _RETIRES = b"=", b"!"
# How often the zygote runs a call's code on its own function as it starts: CPython specializes a
# function's code after its first few calls (8 in 3.11).
_WARM_UP_RUNS = 10
# What the ``S`` frames compiled, by number: a code object or the exception compiling raised, and
# the warnings it printed.
_compiled: dict[int, tuple[Any, str]] = {}
# In the sandbox: what makes the zygote join a new anonymous session keyring just before each
# fork, so that each call's process starts in one no earlier call had (keyctl(KEYCTL_JOIN_SESSION_KEYRING,
# NULL), the one keyctl the syscall filter passes). Done here, not in the call's process, where
# every page the call into C touches would be copied.
_join_session_keyring: Any = None
# What a call's process needs made before the fork rather than in the process, where every page
# written costs a fault: the C encoder ``json.dumps(default=str, ensure_ascii=False)`` would build
# through three Python layers (no circular check: a value that holds itself fails with
# RecursionError instead), and the buffers a call's output is captured in, empty in every call.
_encode_json = _json.make_encoder(None, str, _json.encode_basestring, None, ": ", ", ", False, False, True)
_stdout, _stderr = io.StringIO(), io.StringIO()


# Socket buffers are kernel memory that no process's counts show. In a network namespace of the
# sandbox's own, the kernel's socket diagnostics (netlink, NETLINK_SOCK_DIAG) list every socket of
# the call with what its buffers hold: one dump per family and protocol, each a request and where
# the memory attribute sits in each answer (after the 16-byte unix_diag_msg or the 72-byte
# inet_diag_msg), and that attribute's type (UNIX_DIAG_MEMINFO, INET_DIAG_SKMEMINFO).
_NLMSG = struct.Struct("=IHHII")  # struct nlmsghdr
_ATTRIBUTE = struct.Struct("=HH")  # struct rtattr (nlattr)
_MEMINFO = struct.Struct("=6I")  # rmem_alloc, rcvbuf, wmem_alloc, sndbuf, fwd_alloc, wmem_queued
_NLMSG_ERROR, _NLMSG_DONE = 2, 3


def _diag_request(body: bytes) -> bytes:
    # SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP
    return _NLMSG.pack(_NLMSG.size + len(body), 20, 0x301, 0, 0) + body


_SOCKET_DUMPS = (
    # unix_diag_req: AF_UNIX, every state, UDIAG_SHOW_MEMINFO
    (_diag_request(struct.pack("=BBHIII8x", 1, 0, 0, 0xFFFFFFFF, 0, 0x20)), 16, 5),
    *(
        # inet_diag_req_v2: the family, the protocol, the INET_DIAG_SKMEMINFO extension, every state
        (_diag_request(struct.pack("=BBBxI48x", family, protocol, 1 << (7 - 1), 0xFFFFFFFF)), 72, 7)
        for family in (2, 10)  # AF_INET, AF_INET6
        for protocol in (6, 17)  # TCP, UDP
    ),
)


class Options:
    """The command line: ``--isolated``, ``--own-network``, ``--scratch=DIR`` and ``--keep=PATH``
    (each repeated), and the per-call limits."""

    __slots__ = (
        "file_mb",
        "isolated",
        "keep",
        "leading",
        "memory_mb",
        "open_files",
        "own_network",
        "processes",
        "scratch",
    )

    def __init__(self) -> None:
        self.isolated = False  # pid 1 of a bubblewrap sandbox
        self.own_network = False  # the sandbox's network namespace is its own: its sockets are the call's
        self.scratch: list[str] = []  # directories wiped after every call
        self.keep: set[str] = set()  # paths under them that the wipe leaves, with their parents
        self.leading: set[str] = set()  # those parents
        self.memory_mb = 512
        self.processes = 32
        self.open_files = 256
        self.file_mb = 64

    @classmethod
    def parse(cls, argv: list[str]) -> Options:
        # No argparse: see the module docstring.
        options = cls()
        for argument in argv:
            name, _, value = argument.removeprefix("--").partition("=")
            name = name.replace("-", "_")
            if name == "isolated":
                options.isolated = True
            elif name == "own_network":
                options.own_network = True
            elif name == "scratch":
                options.scratch.append(value)
            elif name == "keep":
                options.keep.add(value)
            elif name in ("memory_mb", "processes", "open_files", "file_mb"):
                setattr(options, name, int(value))
            else:
                raise SystemExit(f"nightshift-tool-zygote: unknown argument {argument!r}")
        options.leading = {parent for path in options.keep for parent in _parents(path)}
        return options


def main(argv: list[str] | None = None) -> int:
    """Serve calls until the server closes the request stream."""
    options = Options.parse(sys.argv[1:] if argv is None else argv)
    os.environ.pop("LD_BIND_NOW", None)  # the launcher's, for this process's start only: no call sees it
    _warm_up()
    if options.isolated:
        if os.getuid() == 0:
            # The server is root: bwrap kept CAP_SETUID/CAP_SETGID for this one step, and
            # setresuid to a non-zero uid drops every capability. (As another user, bwrap started
            # the zygote as the sandbox uid already, without groups to drop.)
            os.setgroups([])
            os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
            os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        libc = ctypes.CDLL(None, use_errno=True)
        # Undumpable: tools (the same uid) can neither read nor write its memory (/proc/1/mem).
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        # Changing uid cleared the death signal bubblewrap set (--die-with-parent): set it again.
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The session keyring came from the server, with whatever it (or a service manager) keeps
        # there: the zygote and every call's process get an empty one of their own instead.
        global _join_session_keyring
        _join_session_keyring = functools.partial(
            libc.syscall, _KEYCTL[os.uname().machine], _KEYCTL_JOIN_SESSION_KEYRING, None
        )
        if _join_session_keyring() < 0:
            raise SystemExit(
                f"nightshift-tool-zygote: cannot leave the server's keyring: {os.strerror(ctypes.get_errno())}"
            )
    # As pid 1 a signal without a handler is ignored: tools cannot interrupt the zygote.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    requests, responses = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # raw writes to fd 1 by tools land in stderr, which the server drains
    _send(responses, b'{"ready": true}')
    while True:
        header = _read_exactly(requests, HEADER.size)
        if len(header) < HEADER.size:
            return 0  # the server closed the request stream
        kind, length, timeout = HEADER.unpack(header)
        if kind == b"S":
            _compile(_read_exactly(requests, length))
            continue
        if kind != b"C":
            raise SystemExit(f"nightshift-tool-zygote: unknown frame {kind!r}")
        answer, clean = _serve_one(requests, responses, length, timeout, options)
        _send(responses, (_GOES_ON if clean else _RETIRES) + answer)
        if not clean:
            return 0


def _warm_up() -> None:
    """Run what a call's process runs after its fork, on a function of the zygote's own, enough
    times for CPython to settle its code: a function that has run only in fresh processes is
    warmed up again in each, which writes its code object and so costs a page copy per call."""
    # compile() is slow the first time in a process, too.
    _compiled[-1] = (compile("def warm(a):\n    return a\n", "<warm>", "exec"), "")
    answers_r, answers_w = os.pipe()
    try:
        for _ in range(_WARM_UP_RUNS):
            _send_answer(answers_w, _run(-1, "warm", {"a": "x"}))
            _send_answer(answers_w, _failure_dict("warm", "", ""))
            os.read(answers_r, 1 << 16)
    finally:
        os.close(answers_r)
        os.close(answers_w)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # _run leaves them to the call's buffers
        del _compiled[-1]


def _compile(body: bytes) -> None:
    """Compile a tool's source for the calls to come, as each call's process would: what fails is
    kept to fail them with, and the warnings compiling printed, to print in each."""
    number, source_code = marshal.loads(body)
    sys.stderr = warnings = io.StringIO()
    try:
        code: Any = compile(source_code, "<tool>", "exec")
    except Exception as exc:  # SyntaxError, and the MemoryError or RecursionError of a hostile source
        code = exc.with_traceback(None)
    finally:
        sys.stderr = sys.__stderr__
    _compiled[number] = (code, warnings.getvalue())


def _send(fd: int, line: bytes) -> None:
    view = memoryview(line + b"\n")
    while view:
        view = view[os.write(fd, view) :]


def _serve_one(requests: int, responses: int, length: int, timeout: float, options: Options) -> tuple[bytes, bool]:
    """Fork a child for the call whose body (``length`` bytes) is next on ``requests``, and
    supervise it; its answer, and whether the sandbox is still clean."""
    if _join_session_keyring is not None and _join_session_keyring() < 0:
        return _failure("the sandbox could not make a session keyring for the call"), False
    result_r, result_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(result_r)
        code = 70
        try:
            code = _child(requests, responses, result_w, length, timeout, options)
        finally:
            os._exit(code)
    if not options.isolated:
        # Its own process group, as the child makes itself too: whichever runs first, a kill of
        # the group cannot come before it exists.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
    os.close(result_w)
    try:
        answer, read_all = _supervise(pid, result_r, requests, timeout, options)
    finally:
        os.close(result_r)
    # A child that died before reading all of its call left the rest in the request stream, where
    # the next header would be looked for: the server starts a fresh sandbox instead.
    return answer, read_all and _clean_up(options)


def _supervise(pid: int, result_r: int, requests: int, timeout: float, options: Options) -> tuple[bytes, bool]:
    """Wait for the call's answer within its limits, then make sure every process of it is gone;
    the answer, and whether the call's process read all of its call."""
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
                if _call_memory(options) > options.memory_mb * _MIB:
                    reason = f"the tool used more than {options.memory_mb} MB of memory (all its processes together)"
    finally:
        os.close(pidfd)
    _kill_call(pid, options)
    if reading:
        # Its writers are dead now, so what the pipe holds is the rest of the answer (not waited
        # for: in process mode a tool's process can escape the kill).
        os.set_blocking(result_r, False)
        try:
            while len(data) <= ANSWER_LIMIT and (chunk := os.read(result_r, 1 << 16)):
                data += chunk
        except BlockingIOError:
            pass
    status = _reap(pid, options)
    read_all = data.startswith(_READ_MARK)
    if read_all:
        del data[: len(_READ_MARK)]
    if reason is None and len(data) > ANSWER_LIMIT:
        reason = f"the tool's answer is longer than {ANSWER_LIMIT} bytes"
    if reason is not None:
        return _failure(reason), read_all
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL) and not data:
        reason = f"the tool was killed ({_describe_status(status)}; CPU time limit {math.ceil(timeout)} s)"
    elif not data or os.waitstatus_to_exitcode(status) != 0:
        reason = f"the tool's process ended before answering ({_describe_status(status)})"
    elif b"\n" in data:
        reason = "the tool wrote into its answer channel"
    return (bytes(data) if reason is None else _failure(reason)), read_all


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


def _call_memory(options: Options) -> int:
    """All the memory the call holds that the zygote can see; a sandbox of its own only."""
    total = _namespace_memory() + _scratch_memory(options)
    if options.own_network:
        total += _socket_memory()
    return total


def _socket_memory() -> int:
    """What the buffers of every socket of the network namespace hold (received, and sent but
    not yet taken), as the kernel's socket diagnostics tell; 0 for a kind it cannot list."""
    total = 0
    sock = _socket.socket(16, 3, 4)  # AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG
    try:
        for request, header, kind in _SOCKET_DUMPS:
            sock.send(request)
            done = False
            while not done:
                data = sock.recv(1 << 16)
                position = 0
                while position + _NLMSG.size <= len(data):
                    length, message_type = _NLMSG.unpack_from(data, position)[:2]
                    if message_type in (_NLMSG_DONE, _NLMSG_ERROR) or length < _NLMSG.size:
                        done = True
                        break
                    end, attribute = position + length, position + _NLMSG.size + header
                    while attribute + _ATTRIBUTE.size <= end:
                        size, attribute_type = _ATTRIBUTE.unpack_from(data, attribute)
                        if size < _ATTRIBUTE.size:
                            break
                        if attribute_type == kind and size >= _ATTRIBUTE.size + _MEMINFO.size:
                            received, _, sent, _, _, queued = _MEMINFO.unpack_from(data, attribute + _ATTRIBUTE.size)
                            total += received + max(sent, queued)
                        attribute += (size + 3) & ~3
                    position += (length + 3) & ~3
                if not data:
                    done = True
    except OSError:
        pass  # no socket diagnostics in this kernel: the rest of the watch still holds
    finally:
        sock.close()
    return total


def _scratch_memory(options: Options) -> int:
    """What the files in the scratch tmpfs hold: memory too, which no process's counts show."""
    total = 0
    for scratch in options.scratch:
        with contextlib.suppress(OSError):
            stat = os.statvfs(scratch)
            total += (stat.f_blocks - stat.f_bfree) * stat.f_frsize
    return total


def _kill_call(pid: int, options: Options) -> None:
    """SIGKILL every process the call started, wherever it went."""
    try:
        if options.isolated:
            os.kill(-1, signal.SIGKILL)  # from pid 1: every other process of the namespace
        else:
            os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
        clean = _wipe(scratch, options.keep, options.leading) and clean
    # System V IPC objects and POSIX message queues would outlive processes too: the sandbox's
    # syscall filter refuses them.
    return clean


def _wipe(directory: str, keep: set[str], leading: set[str]) -> bool:
    """Remove everything in ``directory`` but the ``keep`` paths and the directories ``leading``
    to them (whose other entries go); False when something could not be removed."""
    clean = True
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return False
    for entry in entries:
        if entry.path in keep:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                if entry.path in leading:
                    clean = _wipe(entry.path, keep, leading) and clean
                else:
                    _remove_tree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            clean = False
    return clean


def _parents(path: str) -> list[str]:
    parents = []
    while (path := os.path.dirname(path)) not in ("/", ""):
        parents.append(path)
    return parents


def _remove_tree(path: str) -> None:
    import shutil  # only when a tool left a directory: kept out of the zygote's heap until then

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=_make_removable)
    else:
        shutil.rmtree(path, onerror=_make_removable)


def _make_removable(function: Any, path: str, failed: Any) -> None:
    """rmtree's error handler: what a tool made unreadable or unwritable, given back and removed.

    Everything a call leaves belongs to the sandbox uid, as the zygote does, so ``chmod`` restores
    what the tool took away. ``function`` is what failed: ``os.unlink`` or ``os.rmdir`` (the parent
    was not writable) is tried again; ``os.open``, ``os.scandir`` or ``os.lstat`` (a directory
    that could not be read or searched) means removing that whole tree again, now readable. Any
    other error goes on up, so that the zygote makes way for a fresh sandbox.
    """
    error = failed[1] if isinstance(failed, tuple) else failed  # onerror gives sys.exc_info()
    if not isinstance(error, PermissionError):
        raise error
    # Not allowed on the scratch directory itself (the sandbox's /tmp is root's, and sticky),
    # where writing needs no change.
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), 0o700)
    if function in (os.unlink, os.remove, os.rmdir):
        function(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)  # from now on readable: the tree below is removed, or fails otherwise
        _remove_tree(path)
    else:
        os.unlink(path)


def _child(requests: int, responses: int, result_w: int, length: int, timeout: float, options: Options) -> int:
    """One call, in a fresh process: read it, lower the limits, run the tool, answer."""
    os.setpgid(0, 0)  # its own process group, which the zygote kills after the call
    os.close(responses)
    body = _read_exactly(requests, length, close=True)
    if len(body) == length:
        os.write(result_w, _READ_MARK)
    try:
        env, code, function_name, arguments = marshal.loads(body)
    except (ValueError, EOFError, TypeError) as exc:
        _send_answer(result_w, _failure_dict(f"bad request: {exc}", "", ""))
        return 0
    _limit(options, timeout)
    if env:  # the agent's secrets, most often none: updating os.environ costs a fresh process ~50 page faults
        os.environ.update(env)
    if options.scratch:
        os.chdir(options.scratch[0])
    _send_answer(result_w, _run(code, function_name, arguments))
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
        # Queued signals are counted per user up the namespace tree too (see launch.py).
        (resource.RLIMIT_SIGPENDING, _SIGNALS_PENDING),
    ):
        if value > 0:  # 0: no limit of this kind
            resource.setrlimit(limit, (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _send_answer(fd: int, answer: dict[str, Any]) -> None:
    view = memoryview(_encode(answer))
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # the zygote gave up on this call
        pass


def _run(code: int | str, function_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    # Not restored: the process ends with the call.
    sys.stdout, sys.stderr = stdout, stderr = _stdout, _stderr
    try:
        value = _call(code, function_name, arguments)
    except BaseException as exc:  # sys.exit() in a tool is the tool's failure
        return _failure_dict(_describe(exc), stdout.getvalue(), stderr.getvalue())
    return {
        "ok": True,
        "value": value,
        "error": None,
        "stdout": _cut(stdout.getvalue()),
        "stderr": _cut(stderr.getvalue()),
    }


def _call(code: int | str, function_name: str, arguments: dict[str, Any]) -> Any:
    if isinstance(code, str):
        compiled = compile(code, "<tool>", "exec")
    else:
        compiled, warnings = _compiled[code]
        sys.stderr.write(warnings)
    if isinstance(compiled, BaseException):
        raise compiled
    namespace: dict[str, Any] = {"__name__": _TOOL_MODULE_NAME, "__builtins__": builtins}
    exec(compiled, namespace)
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
    return "".join(_encode_json(message, 0)).encode("utf-8", "replace")


def _failure(error: str) -> bytes:
    return _encode(_failure_dict(error, "", ""))


def _failure_dict(error: str, stdout: str, stderr: str) -> dict[str, Any]:
    return {"ok": False, "value": None, "error": error, "stdout": _cut(stdout), "stderr": _cut(stderr)}


def _read_exactly(fd: int, size: int, *, close: bool = False) -> bytes:
    """``size`` bytes from ``fd``, or fewer when it reaches end of file first."""
    data = b""
    try:
        while len(data) < size and (chunk := os.read(fd, size - len(data))):
            data += chunk
    finally:
        if close:
            os.close(fd)
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
