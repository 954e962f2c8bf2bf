"""The value of a field an update leaves alone, apart from None (which may mean "clear it").

A PATCH body tells "absent" from "null"; the services' typed updates (``AgentChanges``,
``BlockChanges``, ``ToolChanges``) keep that difference with :data:`UNSET` as each field's default.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Final, TypeAlias, TypeVar

T = TypeVar("T")


class Unset(enum.Enum):
    """A single member, so that ``value is UNSET`` narrows the type for the checker."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET

# A field of an update: its new value, or UNSET to keep the current one.
Maybe: TypeAlias = T | Unset


def given(value: T | None) -> Maybe[T]:
    """A request field where null means "keep": UNSET for None, the value otherwise."""
    return UNSET if value is None else value


def set_fields(changes: Any) -> dict[str, Any]:
    """The fields of an update dataclass that are not UNSET, by name (for ``dataclasses.replace``)."""
    found = {f.name: getattr(changes, f.name) for f in dataclasses.fields(changes)}
    return {name: value for name, value in found.items() if value is not UNSET}
