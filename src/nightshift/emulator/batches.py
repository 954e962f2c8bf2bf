"""One emulated batch, for either API: its requests' precomputed results and its state machine.

::

    RUNNING --(progress reaches 1; OpenAI may show "finalizing" for some polls)--> ENDED/completed
    RUNNING --(expire_after_polls or expires_at passed)--------------------------> ENDED/expired
    RUNNING --(cancel)--> CANCELING --(cancel_polls retrieves later)--------------> ENDED/canceled
    RUNNING --(input refused while validating, OpenAI)---------------------------> ENDED/failed

Progress is the smaller of ``polls / (polls_to_end + 1)`` and ``elapsed / seconds_to_end``; that
share of the requests, in processing order, has been processed. The ``held_back`` requests come
last in that order (``EmulatorState.new_batch`` puts them there) and are processed once progress
reaches 1 and ``held_back_seconds`` have passed since the create: a batch's stragglers. On a
cancel or an expiry the processed requests keep their results and the others become canceled or
expired. Every answer is computed when the batch is created (the model is deterministic), so
ending a batch is cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    """Where a batch is."""

    RUNNING = "running"  # requests being processed -> canceling | ended
    CANCELING = "canceling"  # cancel asked, winding down for ``cancel_polls`` polls -> ended
    ENDED = "ended"  # every request has its final result (terminal)


class EndKind(StrEnum):
    """How an ended batch ended."""

    COMPLETED = "completed"  # every request was processed
    CANCELED = "canceled"  # cancelled; unprocessed requests are canceled
    EXPIRED = "expired"  # ran out of time; unprocessed requests are expired
    FAILED = "failed"  # refused as a whole (OpenAI input file validation); nothing ran


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """The latency knobs of the config, copied when the batch is created."""

    polls_to_end: int = 0
    seconds_to_end: float = 0.0
    finalizing_polls: int = 0
    cancel_polls: int = 0
    expire_after_polls: int | None = None
    expires_at: float
    held_back: int = 0  # the last requests, processed only once ``held_back_seconds`` have passed
    held_back_seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestResult:
    """One request's precomputed answer: a success body, or an error with its HTTP status."""

    ok: bool
    body: dict[str, Any]
    status: int = 200


@dataclass(slots=True, kw_only=True)
class BatchJob:
    """A batch of either API. ``extra`` holds what only one API shows (OpenAI's file ids...)."""

    id: str
    created_at: float
    timing: Timing
    custom_ids: list[str]
    results: list[RequestResult]
    phase: Phase = Phase.RUNNING
    end_kind: EndKind | None = None
    polls: int = 0
    processed: int = 0
    finalizing: bool = False
    finalizing_seen: int = 0
    cancel_started_at: float | None = None
    cancel_polls_seen: int = 0
    ended_at: float | None = None
    failure: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    _ok_prefix: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        running = 0
        self._ok_prefix = [0]
        for result in self.results:
            running += result.ok
            self._ok_prefix.append(running)

    @property
    def total(self) -> int:
        """Number of requests."""
        return len(self.custom_ids)

    def progress(self, now: float) -> float:
        """Share of the requests processed by now (0 to 1)."""
        t = self.timing
        by_polls = 1.0 if t.polls_to_end == 0 else min(1.0, self.polls / (t.polls_to_end + 1))
        by_time = 1.0 if t.seconds_to_end <= 0 else min(1.0, (now - self.created_at) / t.seconds_to_end)
        return min(by_polls, by_time)

    def done_count(self, now: float) -> int:
        """Requests with a result by now (all of them once ended)."""
        if self.phase is not Phase.RUNNING:
            return self.processed
        if self._all_done(now):
            return self.total
        return math.floor(self.progress(now) * (self.total - self.timing.held_back))

    def _all_done(self, now: float) -> bool:
        t = self.timing
        return self.progress(now) >= 1.0 and (t.held_back == 0 or now - self.created_at >= t.held_back_seconds)

    def succeeded_count(self, count: int) -> int:
        """How many of the first ``count`` requests succeeded."""
        return self._ok_prefix[count]

    def refresh(self, now: float, *, poll: bool) -> None:
        """Apply the transitions due by ``now``; ``poll`` counts a retrieve call."""
        if self.phase is Phase.ENDED:
            return
        if poll:
            self.polls += 1
        if self.phase is Phase.CANCELING:
            if poll:
                self.cancel_polls_seen += 1
            if self.cancel_polls_seen > self.timing.cancel_polls:
                self._end(EndKind.CANCELED, self.processed, now)
            return
        if self.failure is not None:
            if poll:
                self._end(EndKind.FAILED, 0, now)
            return
        if self._all_done(now):
            if self.finalizing_seen < self.timing.finalizing_polls:
                self.finalizing = True
                self.finalizing_seen += poll
                return
            self._end(EndKind.COMPLETED, self.total, now)
            return
        limit = self.timing.expire_after_polls
        if now >= self.timing.expires_at or (limit is not None and self.polls > limit):
            self._end(EndKind.EXPIRED, self.done_count(now), now)

    def cancel(self, now: float) -> None:
        """Start cancelling: what is processed by now stays, the rest will be canceled."""
        if self.phase is not Phase.RUNNING:
            return
        self.processed = 0 if self.failure is not None else self.done_count(now)
        self.phase = Phase.CANCELING
        self.cancel_started_at = now

    def _end(self, kind: EndKind, processed: int, now: float) -> None:
        self.phase = Phase.ENDED
        self.end_kind = kind
        self.processed = processed
        self.ended_at = now
        self.finalizing = False
