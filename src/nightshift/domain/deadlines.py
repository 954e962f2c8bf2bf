"""When a step's provider batch stops being waited on, for its run's deadline.

A run may be given a deadline. Its steps go through the batch API as any run's do, but a step's
batch is not waited on for ever: when the rule below says so, its open requests are *taken
over*. The providers say nothing of a single request until their batch ends, so the batch is
cancelled first; the requests it had processed by then come back with its results and are
applied as usual, and the ones it had not are sent once each through the normal API
(``batch/takeover.py``). No request is answered twice, and none is billed twice.

A step's batch is taken over at the first poll past either of two moments:

* **its share of the time left**: ``STEP_SHARE`` of the time between its submit and the deadline.
  Each step leaves the rest to the steps after it, however many there turn out to be, and a
  step submitted past the deadline is taken over at its first poll;
* **a tail that outstays the bulk**: once a poll saw at most ``TAIL_SHARE`` of its requests open
  (``tail_at``), the tail may last ``TAIL_PATIENCE`` times as long as the bulk took, and at
  least ``MIN_TAIL_WAIT``: a few stragglers do not hold the step for hours when the deadline is
  far, and a batch that is merely slow is not taken over at all.

A run without a deadline is never taken over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

# A step's batch may be waited on for this share of the time its submit left to the deadline.
STEP_SHARE = 0.5
# At most this share of a batch's requests open: the tail of stragglers.
TAIL_SHARE = 0.05
# The tail may last this many times as long as the bulk took, and at least MIN_TAIL_WAIT.
TAIL_PATIENCE = 0.5
MIN_TAIL_WAIT = timedelta(minutes=1)


class Takeover(StrEnum):
    """Why a batch's open requests were taken over."""

    DEADLINE = "deadline"  # its share of the time left to the deadline ran out
    TAIL = "tail"  # a tail of stragglers outstayed the bulk


def in_tail(request_counts: Mapping[str, int]) -> bool:
    """Whether a poll's counts show only a tail of the batch's requests open (and some)."""
    processing = request_counts.get("processing", 0)
    total = sum(request_counts.values())
    return 0 < processing <= TAIL_SHARE * total


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A running batch of a run with a deadline: when it was submitted and when its tail began."""

    deadline: datetime
    submitted_at: datetime
    tail_at: datetime | None = None

    @property
    def share_ends(self) -> datetime:
        """When its share of the time left to the deadline runs out."""
        return self.submitted_at + (self.deadline - self.submitted_at) * STEP_SHARE

    @property
    def take_over_at(self) -> datetime:
        """The first moment at which its open requests are taken over."""
        if self.tail_at is None:
            return self.share_ends
        bulk = self.tail_at - self.submitted_at
        return min(self.share_ends, self.tail_at + max(MIN_TAIL_WAIT, bulk * TAIL_PATIENCE))

    def reason(self, now: datetime) -> Takeover | None:
        """Why its open requests are taken over at ``now``; None: it is waited on."""
        if now < self.take_over_at:
            return None
        return Takeover.DEADLINE if now >= self.share_ends else Takeover.TAIL
