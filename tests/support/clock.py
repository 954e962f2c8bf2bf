"""A clock the test moves on: what is due in a minute is due after ``advance(60)``, at once."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI


class ManualClock:
    """A ``nightshift.clock.Clock`` ahead of the machine's by as much as the test has advanced it.

    It keeps running with the machine's clock underneath, so that a row stamped by code that
    reads the system clock (a run written by the API) is never in its future; what the test
    controls is the jumps: a lease, a backoff or a poll interval passes when it says so.
    """

    def __init__(self) -> None:
        self._ahead = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self._ahead)

    def monotonic(self) -> float:
        return time.monotonic() + self._ahead

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        assert seconds >= 0, "a clock does not go back"
        self._ahead += seconds


def clock_of(app: FastAPI) -> ManualClock:
    """The manual clock an app of the tests runs on (the ``clock`` fixture's)."""
    clock = app.state.nightshift.clock
    assert isinstance(clock, ManualClock)
    return clock
