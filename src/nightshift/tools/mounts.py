"""What a bubblewrap sandbox sees of the host's file system (see ``tools/launch.py``).

A fresh root with read-only binds of the system directories (``/usr`` and its top-level links), a
few files of ``/etc`` and the Python runtime with its packages; the private scratch directories
are the launcher's. Nothing else of the host: a path to hide that lies inside a bound directory
(``NIGHTSHIFT_HOME``, the SQLite database's folder) is covered by an empty tmpfs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

# The sandbox's private, size-bounded scratch directories, wiped after every call.
SCRATCH = (Path("/tmp"), Path("/dev/shm"))
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc a Python program and its libraries read: the loader cache, name resolution,
# certificates, time zones, the alternatives that /usr/bin links point into.
_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "mime.types",
    "ssl",
    "ca-certificates",
    "alternatives",
)


def mount_arguments(
    python: str, prefixes: Sequence[str], hidden: Sequence[Path]
) -> tuple[list[str], list[str], list[str]]:
    """bubblewrap's arguments for the read-only view of the system, then for the Python runtime
    (which go after the private /tmp), and the runtime's paths under a scratch directory."""
    system: list[str] = []
    bound: list[Path] = []
    for name in _SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            system += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            system += ["--ro-bind", name, name]
            bound.append(path)
    for entry in _ETC_ENTRIES:
        system += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
    runtime_paths = {Path(p).resolve() for p in prefixes}
    runtime_paths.add(Path(os.path.realpath(python)).parent.parent)
    runtime: list[str] = []
    keep: list[str] = []
    made: set[Path] = {Path("/dev"), *SCRATCH}
    for path in sorted(runtime_paths):
        if any(path.is_relative_to(b) for b in bound):
            continue
        # Parents are made world-readable: they may be private on the host (/root for pyenv).
        for parent in reversed(path.parents[:-1]):
            if parent not in made and not any(parent.is_relative_to(b) for b in bound):
                runtime += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        runtime += ["--ro-bind", str(path), str(path)]
        bound.append(path)
        if any(path.is_relative_to(s) for s in SCRATCH):
            keep.append(str(path))
    for path in hidden:
        resolved = path.expanduser().resolve()
        if any(resolved.is_relative_to(b) for b in bound) and resolved.is_dir():
            runtime += ["--tmpfs", str(resolved)]
    return system, runtime, keep
