"""When a running provider batch is polled next: often while it is young, seldom as it ages, and
often again across the span in which its provider's batches usually end.

A provider batch gives no time guarantee (most end within the hour, some take a day), so polling
at one fixed interval either finds most ends late or asks the provider far more than it needs. The
schedule follows the batch's age and, once the process has seen enough of the provider's batches
end, their turnaround (the time from submit to the end we saw):

* young (age x ``AGE_SHARE`` is short): a batch of a few requests is often over within a minute;
* before the usual span: no later than the moment the span opens;
* inside it (p10 to p90 of the observed turnarounds: its model's once ``MIN_OBSERVED`` batches of
  that model alone ended, else its provider's, see ``Turnarounds``): ``WINDOW_POLLS`` polls across
  the span;
* past it: every ``AGE_SHARE`` of its age, as before the span.

Every gap is between ``shortest`` (the provider's rate limits: ``NIGHTSHIFT_POLL_MIN_SECONDS``)
and ``longest`` (``NIGHTSHIFT_POLL_INTERVAL_SECONDS``), so no batch is polled less often than the
fixed interval would; with the two equal, the schedule is that interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

# A gap of this share of the batch's age: a poll count that grows with the log of the age.
AGE_SHARE = 0.2
# Polls spread across the span in which the provider's batches usually end.
WINDOW_POLLS = 10
# Ends seen before the turnaround says anything: fewer say too little about the spread.
MIN_OBSERVED = 5


@dataclass(frozen=True, slots=True)
class Turnaround:
    """How long a provider's batches took, submit to end, as seen: their spread."""

    p10: timedelta
    p50: timedelta
    p90: timedelta

    @classmethod
    def of(cls, durations: Sequence[timedelta]) -> Turnaround | None:
        """The turnaround of these observed durations; None under ``MIN_OBSERVED`` of them."""
        if len(durations) < MIN_OBSERVED:
            return None
        seconds = sorted(d.total_seconds() for d in durations)
        deciles = statistics.quantiles(seconds, n=10, method="inclusive")
        return cls(
            p10=timedelta(seconds=deciles[0]),
            p50=timedelta(seconds=statistics.median(seconds)),
            p90=timedelta(seconds=deciles[-1]),
        )


@dataclass(frozen=True, slots=True)
class Turnarounds:
    """The turnarounds seen, by provider and by provider and model, with how many ends each."""

    providers: Mapping[str, tuple[int, Turnaround | None]]
    models: Mapping[tuple[str, str], tuple[int, Turnaround | None]]

    @classmethod
    def of(cls, seen: Mapping[tuple[str, str | None], Sequence[timedelta]]) -> Turnarounds:
        """From the durations seen by (provider, model): a batch of several models (model None)
        counts for its provider alone."""
        by_provider: dict[str, list[timedelta]] = {}
        by_model: dict[tuple[str, str], Sequence[timedelta]] = {}
        for (provider, model), durations in seen.items():
            by_provider.setdefault(provider, []).extend(durations)
            if model is not None:
                by_model[provider, model] = durations
        return cls(
            providers={p: (len(d), Turnaround.of(d)) for p, d in sorted(by_provider.items())},
            models={(p, m): (len(d), Turnaround.of(d)) for (p, m), d in sorted(by_model.items())},
        )

    def get(self, provider: str, model: str | None = None) -> Turnaround | None:
        """The model's turnaround once enough of its batches ended, else its provider's."""
        if model is not None:
            spread = self.models.get((provider, model), (0, None))[1]
            if spread is not None:
                return spread
        return self.providers.get(provider, (0, None))[1]


def poll_delay(age: timedelta, turnaround: Turnaround | None, *, shortest: timedelta, longest: timedelta) -> timedelta:
    """How long a running batch of ``age`` (since it was submitted) waits before its next poll."""
    delay = age * AGE_SHARE
    if turnaround is not None:
        if age < turnaround.p10:
            delay = min(delay, turnaround.p10 - age)
        elif age <= turnaround.p90:
            delay = min(delay, (turnaround.p90 - turnaround.p10) / WINDOW_POLLS)
    shortest = min(shortest, longest)
    return max(shortest, min(delay, longest))
