"""The sandbox's syscall filter, run by a small classic-BPF interpreter for both architectures.

The integration tests run the x86_64 (or aarch64) program in the kernel of the machine they run
on; this runs each program as the kernel would, on the syscalls of the other machine too.
"""

from __future__ import annotations

import errno
import struct

import pytest

from nightshift.tools import seccomp

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# From the kernel's asm/unistd_64.h and asm-generic/unistd.h, apart from the filter's own table.
NUMBERS = {
    "x86_64": {"getpid": 39, "read": 0, "memfd_create": 319, "keyctl": 250, "clone": 56, "clone3": 435, "bpf": 321},
    "aarch64": {"getpid": 172, "read": 63, "memfd_create": 279, "keyctl": 219, "clone": 220, "clone3": 435, "bpf": 280},
}
ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM, ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS


def run(program: bytes, *, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """What the kernel's seccomp would do with the syscall ``nr`` of ``arch`` and ``args``."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    instructions = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, accumulator = 0, 0
    while True:
        code, jt, jf, k = instructions[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            pc += jt if accumulator == k else jf
        elif code == 0x45:  # BPF_JMP | BPF_JSET | BPF_K
            pc += jt if accumulator & k else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return int(k)
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_each_machine_s_filter_refuses_what_it_must_and_lets_the_rest_through(machine: str) -> None:
    program, arch, numbers = seccomp.program(machine), AUDIT_ARCH[machine], NUMBERS[machine]

    assert run(program, arch=arch, nr=numbers["getpid"]) == ALLOW
    assert run(program, arch=arch, nr=numbers["read"]) == ALLOW
    assert run(program, arch=arch, nr=numbers["memfd_create"]) == EPERM
    assert run(program, arch=arch, nr=numbers["bpf"]) == EPERM
    # keyctl only to join a new anonymous session keyring.
    assert run(program, arch=arch, nr=numbers["keyctl"], args=(1, 0)) == ALLOW
    assert run(program, arch=arch, nr=numbers["keyctl"], args=(1, 0x7FFF0000)) == EPERM  # a named keyring
    assert run(program, arch=arch, nr=numbers["keyctl"], args=(1 | 1 << 32, 0)) == EPERM
    assert run(program, arch=arch, nr=numbers["keyctl"], args=(11, 0)) == EPERM  # KEYCTL_READ
    # clone, unless it asks for a namespace; clone3 is sent back to clone.
    assert run(program, arch=arch, nr=numbers["clone"], args=(0x11,)) == ALLOW  # SIGCHLD: a fork
    assert run(program, arch=arch, nr=numbers["clone"], args=(0x10000000 | 0x11,)) == EPERM  # CLONE_NEWUSER
    assert run(program, arch=arch, nr=numbers["clone"], args=(0x00020000,)) == EPERM  # CLONE_NEWNS
    assert run(program, arch=arch, nr=numbers["clone3"]) == ENOSYS
    # Any other ABI: the process is killed (its numbers mean other syscalls).
    other = next(a for m, a in AUDIT_ARCH.items() if m != machine)
    assert run(program, arch=other, nr=numbers["getpid"]) == KILL
    assert run(program, arch=0x40000003, nr=numbers["getpid"]) == KILL  # AUDIT_ARCH_I386


def test_x32_syscalls_are_refused_on_x86_64() -> None:
    assert run(seccomp.program("x86_64"), arch=AUDIT_ARCH["x86_64"], nr=39 | 0x40000000) == EPERM


def test_every_denied_syscall_has_a_number_on_each_machine_that_has_it() -> None:
    x86_only = {"iopl", "ioperm", "uselib", "inotify_init"}
    for name in seccomp.DENIED:
        assert name in seccomp.ARCHITECTURES["x86_64"].numbers, name
        assert (name in seccomp.ARCHITECTURES["aarch64"].numbers) == (name not in x86_only), name


def test_a_machine_without_a_table_is_named_with_what_to_do() -> None:
    assert seccomp.supported("riscv64") == (
        "the tool sandbox's syscall filter is kept for aarch64 and x86_64 only, and this machine is 'riscv64' "
        "(NIGHTSHIFT_TOOL_SANDBOX=process runs tools without isolation)"
    )
    with pytest.raises(seccomp.UnsupportedMachine):
        seccomp.program("riscv64")
