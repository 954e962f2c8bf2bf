"""Sandboxes that a server which died as they started left waiting forever, and their end.

bubblewrap starts a sandbox in two processes: the first, outside, clones the second into the new
namespaces, and the second waits until the first has written its id maps and says so. As root,
the first waits for the server (``--userns-block-fd``, see ``launch``) before it says so. A server
killed in that moment takes the first with it (``--die-with-parent``), but the second is not yet
bound to the first: it waits forever, pid 1 of a pid namespace nobody enters, holding a pid and
its pages. The server that died cannot end it, so the next zygote start on this host does.

Such a process is told apart from every live one without a doubt: it still runs bubblewrap with
the zygote's command line (a started sandbox runs the zygote), it is pid 1 of its own pid
namespace, and its parent is not the bubblewrap process that cloned it (a live start's parent has
the same command line, being that process). It is opened as a pidfd before it is looked at, so
that what is killed is what was looked at.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

log = logging.getLogger(__name__)

# Where the zygote's script is bound in every sandbox (see ``launch``): in the command line of
# bubblewrap's two processes until the second runs the zygote.
ZYGOTE_TARGET = "/nightshift/zygote.py"


def end_stranded(bwrap: str) -> int:
    """SIGKILL the sandboxes of this host that a dead server's start left waiting (``bwrap``:
    the path of bubblewrap the command lines start with). Returns how many were killed;
    processes that this user may not signal are left, as are the live ones."""
    ended = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            pidfd = os.pidfd_open(int(name))
        except OSError:
            continue  # it ended, or is not ours to see
        try:
            if _stranded(int(name), bwrap):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                ended += 1
        except OSError:
            continue  # it ended meanwhile, or is not ours to signal
        finally:
            os.close(pidfd)
    if ended:
        log.warning("ended %d tool sandbox(es) left waiting by a server that died as they started", ended)
    return ended


def _stranded(pid: int, bwrap: str) -> bool:
    command = _command_line(pid)
    if not command.startswith(bwrap.encode() + b"\0") or f"\0{ZYGOTE_TARGET}\0".encode() not in command:
        return False
    status = _status(pid)
    namespaced = status.get("NSpid", "").split()
    if len(namespaced) < 2 or namespaced[-1] != "1":
        return False  # not the second process (the first lives in the host's pid namespace)
    with contextlib.suppress(OSError):
        if _command_line(int(status["PPid"])) == command:
            return False  # its first process is alive: a start under way
    return True


def _command_line(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        return file.read()


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as file:
        return dict(line.rstrip("\n").split(":\t", 1) for line in file if ":\t" in line)
