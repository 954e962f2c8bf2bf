"""A clock the test moves on: what is due in a minute is due after ``advance(60)``, at once."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI

# Years from the machine's time: a row stamped by the machine's clock rather than the server's
# would be years in the past of every time the server decides by, and the tests that compare
# stored times would see it.
START = datetime(2030, 1, 1, tzinfo=UTC)


class ManualClock:
    """A ``nightshift.clock.Clock`` that starts at ``start`` and runs as the machine's runs, plus
    what the test has advanced it by.

    It keeps running, so that what a test writes one after the other is stamped in that order;
    what the test controls is the jumps: a lease, a backoff or a poll interval passes when it
    says so.
    """

    def __init__(self, start: datetime = START) -> None:
        assert start.tzinfo is not None, "the server's times are aware"
        self._start = start
        self._started = time.monotonic()
        self._ahead = 0.0

    def now(self) -> datetime:
        return self._start + timedelta(seconds=time.monotonic() - self._started + self._ahead)

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
