"""What runs on the host, as tests of the tool sandbox see it from outside."""

from __future__ import annotations

import os


def host_processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes of the host whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if marker.encode() not in cmdline.read():
                    continue
            with open(f"/proc/{name}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue  # it ended meanwhile
        found.append(int(name))
    return found


# Tool source: what a call finds in a scratch directory (its /tmp, /dev/shm) but the way to the
# Python runtime, which the sandbox shows there when the server runs from under /tmp (a clone in
# /tmp, as CI may make one). Tests that check a call leaves nothing behind list with it.
SCRATCH_ENTRIES = """
import os as _os
import sys as _sys


def scratch_entries(directory):
    here = _os.path.abspath(directory)
    python = _os.path.dirname(_os.path.dirname(_os.path.realpath(_sys.executable)))
    runtime = {_os.path.realpath(p) for p in (_sys.prefix, _sys.base_prefix, python)}

    def leads_to_runtime(path):
        return any(r == path or r.startswith(path + "/") for r in runtime)

    return sorted(e for e in _os.listdir(here) if not leads_to_runtime(_os.path.join(here, e)))
"""
