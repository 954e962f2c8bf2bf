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
