"""When a step's provider batch stops being waited on, for its run's deadline.

A run may be given a deadline. Its steps go through the batch API as any run's do, but a step's
batch is not waited on for ever: when the rule below says so, its open requests are *taken
over*. The providers say nothing of a single request until their batch ends, so the batch is
cancelled first; the requests it had processed by then come back with its results and are
applied as usual, and the ones it had not are sent once each through the normal API
(``batch/takeover.py``). No request is answered twice, and none is billed twice.

Of the time between a step's submit and the deadline, the step takes ``STEP_SHARE`` and leaves
the rest to the steps after it, however many there turn out to be; more, up to
``LATEST_SHARE``, only to let a bulk still being processed finish. At a poll, its batch is taken
over:

* **past its share**, unless the bulk of its requests (all but ``TAIL_SHARE`` of them) is still
  being processed and expected to be done by ``LATEST_SHARE``: at the pace the batch has kept so
  far, or, for a provider whose counts say nothing until a batch ends (Anthropic's), by its usual
  turnaround (the 90th percentile of the turnarounds seen);
* **past ``LATEST_SHARE``**, whatever is left (a step submitted past the deadline: at its first
  poll);
* **when a tail outstays the bulk**: once only a tail is left (a poll saw at most ``TAIL_SHARE``
  of its requests open, or, without such counts, the usual turnaround has passed: ``tail_at``),
  the tail may last ``TAIL_PATIENCE`` times as long as the bulk took, and at least
  ``MIN_TAIL_WAIT``: a few stragglers do not hold the step for hours when the deadline is far,
  and a batch that is merely slow is not taken over for them.

A run without a deadline is never taken over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

# A step's batch may be waited on for this share of the time its submit left to the deadline...
STEP_SHARE = 0.5
# ... and up to this share when its bulk is expected to be done by then.
LATEST_SHARE = 0.8
# At most this share of a batch's requests open: the tail of stragglers.
TAIL_SHARE = 0.05
# The tail may last this many times as long as the bulk took, and at least MIN_TAIL_WAIT.
TAIL_PATIENCE = 0.5
MIN_TAIL_WAIT = timedelta(minutes=1)


class Takeover(StrEnum):
    """Why a batch's open requests were taken over."""

    DEADLINE = "deadline"  # its share of the time left to the deadline ran out
    TAIL = "tail"  # a tail of stragglers outstayed the bulk


def done_share(request_counts: Mapping[str, int]) -> float:
    """The share of a batch's requests a poll saw processed (0 when it saw none)."""
    total = sum(request_counts.values())
    return 1 - request_counts.get("processing", 0) / total if total else 0.0


def in_tail(request_counts: Mapping[str, int]) -> bool:
    """Whether a poll's counts show only a tail of the batch's requests open (and some)."""
    return 1 - TAIL_SHARE <= done_share(request_counts) < 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A running batch of a run with a deadline, as its latest poll saw it.

    ``done``: the share of its requests done (None: its provider's counts say nothing until the
    end); ``usual``: its provider's usual turnaround, when known, for such a provider;
    ``tail_at``: when a poll first saw only a tail of it open.
    """

    deadline: datetime
    submitted_at: datetime
    done: float | None = None
    usual: timedelta | None = None
    tail_at: datetime | None = None

    @property
    def share_ends(self) -> datetime:
        """When its share of the time left to the deadline runs out."""
        return self.submitted_at + (self.deadline - self.submitted_at) * STEP_SHARE

    @property
    def latest(self) -> datetime:
        """When it is taken over whatever is left."""
        return self.submitted_at + (self.deadline - self.submitted_at) * LATEST_SHARE

    def tail_began(self, now: datetime) -> datetime | None:
        """When only a tail of it was left, as known at ``now`` (None: not yet, or not known)."""
        if self.tail_at is not None:
            return self.tail_at
        if self.done is None and self.usual is not None and now >= self.submitted_at + self.usual:
            return self.submitted_at + self.usual
        return None

    def tail_ends(self, now: datetime) -> datetime | None:
        """When its tail has outstayed the bulk (None: no tail known at ``now``)."""
        began = self.tail_began(now)
        if began is None:
            return None
        return began + max(MIN_TAIL_WAIT, (began - self.submitted_at) * TAIL_PATIENCE)

    def bulk_ends(self, now: datetime) -> datetime | None:
        """When its bulk is expected to be done (None: nothing to go by)."""
        if self.done is None:
            return self.submitted_at + self.usual if self.usual is not None else None
        if self.done <= 0:
            return None
        return self.submitted_at + (now - self.submitted_at) * ((1 - TAIL_SHARE) / self.done)

    def reason(self, now: datetime) -> Takeover | None:
        """Why its open requests are taken over at ``now``; None: it is waited on."""
        if now >= self.latest:
            return Takeover.DEADLINE
        tail_ends = self.tail_ends(now)
        if tail_ends is not None and now >= tail_ends:
            return Takeover.TAIL
        if now >= self.share_ends:
            if tail_ends is not None:  # only a tail is left: no reason to wait on it longer
                return Takeover.DEADLINE
            bulk_ends = self.bulk_ends(now)
            if bulk_ends is None or bulk_ends > self.latest:
                return Takeover.DEADLINE
        return None

    def decides_next(self, now: datetime) -> datetime:
        """The next moment at which the rule may take it over (its next poll is due by then)."""
        usual_ends = self.submitted_at + self.usual if self.usual is not None else None
        moments = (self.share_ends, self.tail_ends(now), self.latest, usual_ends)
        return min((m for m in moments if m is not None and m > now), default=now)
