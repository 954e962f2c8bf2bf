"""The syscall filter of the tool sandbox: a classic-BPF seccomp program that bubblewrap installs.

bubblewrap loads the program (``--seccomp FD``) just before it executes the zygote, so it binds
the zygote and every process a tool starts; nothing can remove it. It is a deny-list: a tool's
Python and the C libraries it loads use a wide and changing set of syscalls, while what is refused
here is a short list that tools have no use for and that either widen the kernel surface (new
mounts, namespaces, io_uring, BPF, tracing, modules) or hold state or memory outside a call's
processes, files and limits (keys, System V and POSIX message-queue IPC, memfd, userfaultfd).
A refused syscall fails with ``EPERM``; the program behaves the same on every kernel, whatever it
knows of a syscall.

The program checks the architecture first: only the server's native ABI passes (a 32-bit
``int 0x80`` on x86_64 would number syscalls differently), and on x86_64 the x32 ABI (syscall
numbers with bit 30 set) is refused. Syscall numbers are kept for x86_64 and aarch64, from the
kernel's ``asm/unistd_64.h`` and ``asm-generic/unistd.h``.

Three syscalls are looked at more closely:

* ``keyctl`` passes in one form only, ``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``: the zygote
  uses it to leave the session keyring it inherited from the server for an anonymous one of its own.
* ``clone`` passes unless its flags ask for a new namespace: no nested user namespace (nor any
  other) even where bubblewrap cannot disable them (``--disable-userns`` does not combine with
  the id maps the server writes when it runs as root).
* ``clone3`` fails with ``ENOSYS``: its flags lie in memory that a filter cannot read, and the C
  library then falls back to ``clone``, which the filter can.

The program is the same for every zygote of a server process, so it is built once
(:func:`program`) and only written to a pipe per zygote.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct
from dataclasses import dataclass

# What each syscall is refused for; the numbers of each are in _NUMBERS.
DENIED = (
    # Namespaces and mounts: a tool cannot build a filesystem or namespace of its own (nested
    # tmpfs would hold memory outside the call's accounting).
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # Memory a call's rlimits and memory watch do not see.
    "memfd_create",
    "memfd_secret",
    "userfaultfd",
    # Kernel objects that outlive the process that made them: keys, System V IPC, POSIX queues.
    "add_key",
    "request_key",
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    # Large kernel surface that tools have no use for.
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "fanotify_init",
    # Counted per user at the top of the namespace tree, where every sandbox's count goes to the
    # namespace's owner (root, when the server is root) and a handful of instances is the whole
    # allowance: one tool could take them all from every other sandbox, and from root itself.
    "inotify_init",
    "inotify_init1",
    # Reaching into other processes.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    # The machine's own administration.
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    # x86_64 only (no such syscall on aarch64).
    "iopl",
    "ioperm",
    "uselib",
)
# keyctl's one operation allowed, and only with a NULL name (see the module docstring).
KEYCTL_JOIN_SESSION_KEYRING = 1
# clone's flags that make namespaces (linux/sched.h: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
# NEWPID, NEWNET); CLONE_NEWTIME is only unshare's and clone3's.
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


@dataclass(frozen=True, slots=True, kw_only=True)
class _Architecture:
    audit_arch: int  # AUDIT_ARCH_* of linux/audit.h: what seccomp_data.arch holds for this ABI
    x32_bit: int  # syscall numbers with this bit set are another ABI (0: none)
    numbers: dict[str, int]


_X86_64 = _Architecture(
    audit_arch=0xC000003E,
    x32_bit=0x40000000,
    numbers={
        "clone": 56,
        "clone3": 435,
        "keyctl": 250,
        "unshare": 272,
        "setns": 308,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "memfd_create": 319,
        "memfd_secret": 447,
        "userfaultfd": 323,
        "add_key": 248,
        "request_key": 249,
        "shmget": 29,
        "shmat": 30,
        "shmctl": 31,
        "shmdt": 67,
        "semget": 64,
        "semop": 65,
        "semctl": 66,
        "semtimedop": 220,
        "msgget": 68,
        "msgsnd": 69,
        "msgrcv": 70,
        "msgctl": 71,
        "mq_open": 240,
        "mq_unlink": 241,
        "mq_timedsend": 242,
        "mq_timedreceive": 243,
        "mq_notify": 244,
        "mq_getsetattr": 245,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "bpf": 321,
        "perf_event_open": 298,
        "fanotify_init": 300,
        "inotify_init": 253,
        "inotify_init1": 294,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "pidfd_getfd": 438,
        "kcmp": 312,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "reboot": 169,
        "swapon": 167,
        "swapoff": 168,
        "acct": 163,
        "quotactl": 179,
        "quotactl_fd": 443,
        "syslog": 103,
        "settimeofday": 164,
        "clock_settime": 227,
        "clock_adjtime": 305,
        "adjtimex": 159,
        "vhangup": 153,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "lookup_dcookie": 212,
        "iopl": 172,
        "ioperm": 173,
        "uselib": 134,
    },
)
_AARCH64 = _Architecture(
    audit_arch=0xC00000B7,
    x32_bit=0,
    numbers={
        "clone": 220,
        "clone3": 435,
        "keyctl": 219,
        "unshare": 97,
        "setns": 268,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "memfd_create": 279,
        "memfd_secret": 447,
        "userfaultfd": 282,
        "add_key": 217,
        "request_key": 218,
        "shmget": 194,
        "shmat": 196,
        "shmctl": 195,
        "shmdt": 197,
        "semget": 190,
        "semop": 193,
        "semctl": 191,
        "semtimedop": 192,
        "msgget": 186,
        "msgsnd": 189,
        "msgrcv": 188,
        "msgctl": 187,
        "mq_open": 180,
        "mq_unlink": 181,
        "mq_timedsend": 182,
        "mq_timedreceive": 183,
        "mq_notify": 184,
        "mq_getsetattr": 185,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "bpf": 280,
        "perf_event_open": 241,
        "fanotify_init": 262,
        "inotify_init1": 26,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "pidfd_getfd": 438,
        "kcmp": 272,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "reboot": 142,
        "swapon": 224,
        "swapoff": 225,
        "acct": 89,
        "quotactl": 60,
        "quotactl_fd": 443,
        "syslog": 116,
        "settimeofday": 170,
        "clock_settime": 112,
        "clock_adjtime": 266,
        "adjtimex": 171,
        "vhangup": 58,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "lookup_dcookie": 18,
    },
)
ARCHITECTURES = {"x86_64": _X86_64, "aarch64": _AARCH64}

# Classic BPF (linux/filter.h, linux/bpf_common.h) and seccomp (linux/seccomp.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JSET_K = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_MAX_JUMP = 255  # a conditional jump's offsets are one byte
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6];
_NR, _ARCH = 0, 4


def _arg(index: int, high: bool) -> int:
    """Offset of one half of ``args[index]`` (both architectures are little-endian)."""
    return 16 + 8 * index + (4 if high else 0)


# struct sock_filter: __u16 code; __u8 jt; __u8 jf; __u32 k; in the machine's byte order.
_INSTRUCTION = struct.Struct("=HBBI")


class UnsupportedMachine(Exception):
    """No syscall table is kept for this machine's architecture."""


def supported(machine: str | None = None) -> str | None:
    """None when the filter can be built here, else why not, in words an operator can act on."""
    machine = machine or platform.machine()
    if machine in ARCHITECTURES:
        return None
    return (
        f"the tool sandbox's syscall filter is kept for {' and '.join(sorted(ARCHITECTURES))} only, "
        f"and this machine is {machine!r} (NIGHTSHIFT_TOOL_SANDBOX=process runs tools without isolation)"
    )


@functools.cache
def program(machine: str | None = None) -> bytes:
    """The compiled filter for ``machine`` (default: this one), as bubblewrap reads it.

    Raises:
        UnsupportedMachine: No syscall table is kept for that architecture.
    """
    machine = machine or platform.machine()
    arch = ARCHITECTURES.get(machine)
    if arch is None:
        raise UnsupportedMachine(supported(machine))
    denied = [arch.numbers[name] for name in DENIED if name in arch.numbers]
    # Instructions as (code, jt, jf, k); a negative jt or jf names a label, resolved below.
    deny, allow, kill, no_such, keyctl, clone = -1, -2, -3, -4, -5, -6
    checks: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, kill, arch.audit_arch),
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if arch.x32_bit:
        checks.append((_JSET_K, deny, 0, arch.x32_bit))
    checks += [
        (_JEQ_K, keyctl, 0, arch.numbers["keyctl"]),
        (_JEQ_K, clone, 0, arch.numbers["clone"]),
        (_JEQ_K, no_such, 0, arch.numbers["clone3"]),
    ]
    checks += [(_JEQ_K, deny, 0, number) for number in denied]
    checks.append((_JEQ_K, allow, allow, 0))  # the end of the list: every other syscall passes
    keyctl_checks = [
        (_LD_W_ABS, 0, 0, _arg(0, high=False)),
        (_JEQ_K, 0, deny, KEYCTL_JOIN_SESSION_KEYRING),
        (_LD_W_ABS, 0, 0, _arg(0, high=True)),
        (_JEQ_K, 0, deny, 0),
        (_LD_W_ABS, 0, 0, _arg(1, high=False)),
        (_JEQ_K, 0, deny, 0),
        (_LD_W_ABS, 0, 0, _arg(1, high=True)),
        (_JEQ_K, allow, deny, 0),
    ]
    clone_checks = [
        (_LD_W_ABS, 0, 0, _arg(0, high=False)),
        (_JSET_K, deny, allow, CLONE_NAMESPACES),
    ]
    body = checks + keyctl_checks + clone_checks
    where = {
        keyctl: len(checks),
        clone: len(checks) + len(keyctl_checks),
        deny: len(body),
        allow: len(body) + 1,
        kill: len(body) + 2,
        no_such: len(body) + 3,
    }
    endings = [
        (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
    ]
    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(body + endings):
        if code in (_JEQ_K, _JSET_K):
            jt, jf = (where[j] - index - 1 if j < 0 else j for j in (jt, jf))
            if not (0 <= jt <= _MAX_JUMP and 0 <= jf <= _MAX_JUMP):
                raise RuntimeError("the syscall filter outgrew one-byte jumps")
        out += _INSTRUCTION.pack(code, jt, jf, k)
    return bytes(out)
