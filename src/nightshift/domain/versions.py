"""Versioned JSON: persisted state that a later step (or a newer nightshift) reads back.

Each record (``StepState``, ``BatchSummary``, ``StoredResult``) writes a ``schema_version`` and
keeps a table of upgrades, one per old version, that bring what is stored to the current one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

# Brings the JSON of one version to the next (the caller sets the new ``schema_version``).
Upgrade: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]


def upgrade_state(data: dict[str, Any], upgrades: Mapping[int, Upgrade], *, current: int) -> dict[str, Any]:
    """``data`` (with a ``schema_version``) brought to version ``current``, one upgrade at a time.

    Raises:
        ValueError: A version newer than ``current``, or an older one with no upgrade.
    """
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise ValueError(f"a saved state without a schema_version: {sorted(data)}")
    if version > current:
        raise ValueError(f"step state schema_version {version} is newer than this nightshift's ({current})")
    while version < current:
        upgrade = upgrades.get(version)
        if upgrade is None:
            raise ValueError(f"no upgrade of step state schema_version {version} to {current}")
        data = upgrade(data)
        version += 1
        data = {**data, "schema_version": version}
    return data
