"""The time the server decides by: one ``Clock`` handed to whatever lets time decide something.

Leases expire, batches fall due, failed stages and callbacks wait their backoff, and every row
the server writes is stamped (by a request, with the time it read once from the clock, or by
the worker): each of those reads the time from the clock it was given, never from the system
directly, so a test sets the time (``tests/support/clock.py``) and drives the worker pass by
pass instead of sleeping until something falls due. The store takes the time as an argument.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Where the time comes from.

    ``now`` is an aware UTC datetime, what is written to the database and compared with what
    is there; ``monotonic`` is seconds from an arbitrary start, for durations within a process.
    Neither goes backwards.
    """

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The machine's clock: what every process runs on."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()
