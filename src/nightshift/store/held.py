"""What a poller keeps in memory of what it read, up to a bound on its estimated size.

A poller goes through the same agents and windows at every step of a run. ``Held`` keeps values
by id, each with its estimated size in bytes, up to ``max_bytes``. When it is full, a value makes
room only by taking the place of the least recently used, and only of one unused for
``IN_USE_SECONDS``: when the steps go through more than it holds, it keeps a part from one step to
the next (with plain least-recently-used order each step would push out what the next one reads
first, and keep nothing of use, at a cost for every value).

Callers decide what may be kept and how to tell that a value is still true (see
``store/message_cache.py`` and ``store/agent_cache.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from nightshift.clock import SYSTEM_CLOCK, Clock

V = TypeVar("V")

# A value used this recently is in use: a step of its agent is expected again (a provider batch
# ends within minutes to an hour, as a rule), and it is not pushed out for another.
IN_USE_SECONDS = 3600.0


class _Entry(Generic[V]):
    __slots__ = ("size", "used", "value")

    def __init__(self, value: V, size: int, used: float) -> None:
        self.value, self.size, self.used = value, size, used


class Held(Generic[V]):
    """Values by id with their sizes, ``max_bytes`` at most (see the module)."""

    def __init__(self, max_bytes: int, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self.clock = clock
        self._held: OrderedDict[str, _Entry[V]] = OrderedDict()  # the least recently used first

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def get(self, key: str, now: float) -> V | None:
        """The value held for ``key``, used at ``now`` (the clock's monotonic time); None if none."""
        entry = self._held.get(key)
        if entry is None:
            return None
        self._held.move_to_end(key)
        entry.used = now
        return entry.value

    def peek(self, key: str) -> V | None:
        """The value held for ``key``, not counted as a use; None if none."""
        entry = self._held.get(key)
        return entry.value if entry is not None else None

    def keep(self, key: str, value: V, size: int, now: float) -> None:
        """Hold ``value`` for ``key`` in place of what was held for it, room permitting."""
        held = self._held
        self.drop(key)
        while held and self.held_bytes + size > self.max_bytes:
            oldest = next(iter(held.values()))
            if now - oldest.used < IN_USE_SECONDS:
                return  # full of values in use: they stay
            held.popitem(last=False)
            self.held_bytes -= oldest.size
        if self.held_bytes + size <= self.max_bytes:
            held[key] = _Entry(value, size, now)
            self.held_bytes += size

    def drop(self, key: str) -> None:
        """Hold nothing for ``key`` any more."""
        entry = self._held.pop(key, None)
        if entry is not None:
            self.held_bytes -= entry.size


class HeldCache(Generic[V]):
    """What a cache of the poller's over ``Held`` shares: its store (``held``), its length and
    what it holds, by id."""

    def __init__(self, max_bytes: int, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.held: Held[V] = Held(max_bytes, clock=clock)

    def __len__(self) -> int:
        return len(self.held)

    def __contains__(self, key: object) -> bool:
        return key in self.held
