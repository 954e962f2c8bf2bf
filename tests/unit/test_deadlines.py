"""When a step's batch stops being waited on for its run's deadline (``domain/deadlines.py``), and
how a take-over is recorded: the route of an answer, the take-over's cost in a batch's summary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from nightshift.domain.answers import OutcomeStatus, Route, StoredResult
from nightshift.domain.batch_progress import BatchSummary
from nightshift.domain.batches import ItemOutcome, StepStatus
from nightshift.domain.costs import Costs
from nightshift.domain.deadlines import MIN_TAIL_WAIT, Takeover, Waiting, done_share, in_tail

SUBMITTED = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def waiting(
    deadline_in: timedelta,
    *,
    tail_after: timedelta | None = None,
    done: float | None = 0.5,
    usual: timedelta | None = None,
) -> Waiting:
    tail_at = SUBMITTED + tail_after if tail_after is not None else None
    return Waiting(deadline=SUBMITTED + deadline_in, submitted_at=SUBMITTED, tail_at=tail_at, done=done, usual=usual)


def at(minutes: float) -> datetime:
    return SUBMITTED + minutes * MINUTE


def test_a_slow_step_waits_for_half_the_time_its_submit_left() -> None:
    # Half done at 5 of 10 minutes: the bulk would end at 9.5, past four fifths (8).
    slow = waiting(10 * MINUTE, done=0.5)
    assert slow.reason(at(4.9)) is None
    assert slow.reason(at(5)) is Takeover.DEADLINE
    assert slow.decides_next(at(1)) == at(5)
    # Nothing done at all by then: nothing to go by, taken over.
    assert waiting(10 * MINUTE, done=0).reason(at(5)) is Takeover.DEADLINE


def test_a_bulk_nearly_done_may_take_up_to_four_fifths() -> None:
    # 80% done at 5 minutes: the bulk (95%) is expected at 5.9, before 8: waited on.
    nearly = waiting(10 * MINUTE, done=0.8)
    assert nearly.reason(at(5)) is None
    assert nearly.decides_next(at(5)) == at(8)
    # Whatever is left at four fifths is taken over.
    assert nearly.reason(at(8)) is Takeover.DEADLINE


def test_a_step_submitted_past_its_deadline_is_taken_over_at_once() -> None:
    assert waiting(-MINUTE, done=0.99).reason(SUBMITTED) is Takeover.DEADLINE


def test_a_tail_may_last_half_as_long_as_the_bulk_and_a_minute_at_least() -> None:
    # The bulk took 20 minutes: the tail is waited on for 10 more, far from the deadline's share.
    slow_bulk = waiting(timedelta(hours=24), tail_after=20 * MINUTE, done=0.98)
    assert slow_bulk.decides_next(at(21)) == at(30)
    assert slow_bulk.reason(at(29)) is None
    assert slow_bulk.reason(at(30)) is Takeover.TAIL
    # A bulk of ten seconds: a minute for its tail.
    quick_bulk = waiting(timedelta(hours=24), tail_after=timedelta(seconds=10), done=0.98)
    assert quick_bulk.tail_ends(at(1)) == SUBMITTED + timedelta(seconds=10) + MIN_TAIL_WAIT
    # Past its share, a step with only a tail left is taken over at once.
    assert waiting(10 * MINUTE, tail_after=4.5 * MINUTE, done=0.98).reason(at(5)) is Takeover.DEADLINE


def test_without_counts_the_usual_turnaround_says_when_the_bulk_is_done() -> None:
    # Anthropic's counts say nothing until the end: past the usual 2 minutes, what is left is a tail.
    usual = waiting(timedelta(hours=1), done=None, usual=2 * MINUTE)
    assert usual.tail_began(at(1.9)) is None
    assert usual.tail_began(at(2.5)) == at(2)
    assert usual.decides_next(at(1)) == at(2)
    assert usual.reason(at(2.9)) is None
    assert usual.reason(at(3)) is Takeover.TAIL
    # Past its share, waited on while the usual turnaround still fits in four fifths.
    late_step = waiting(3 * MINUTE, done=None, usual=2 * MINUTE)  # share ends at 1.5, four fifths at 2.4
    assert late_step.reason(at(1.5)) is None
    assert late_step.reason(at(2)) is Takeover.DEADLINE  # the bulk is done: its tail is taken
    too_slow = waiting(3 * MINUTE, done=None, usual=3 * MINUTE)
    assert too_slow.reason(at(1.5)) is Takeover.DEADLINE
    # Without a usual turnaround (too few batches seen), the share alone.
    assert waiting(10 * MINUTE, done=None).reason(at(5)) is Takeover.DEADLINE


def test_a_tail_is_a_few_requests_still_open() -> None:
    assert in_tail({"processing": 2, "succeeded": 98, "errored": 0, "canceled": 0, "expired": 0})
    assert in_tail({"processing": 5, "succeeded": 90, "errored": 5})
    assert not in_tail({"processing": 6, "succeeded": 94})
    assert not in_tail({"processing": 0, "succeeded": 100})  # over: no tail
    assert not in_tail({})
    assert done_share({"processing": 25, "succeeded": 70, "errored": 5}) == 0.75


def test_an_answer_says_which_way_it_came_and_older_ones_came_in_their_batch() -> None:
    taken_over = StoredResult(status=OutcomeStatus.SUCCEEDED, route=Route.FLEX)
    assert StoredResult.from_json(orjson.loads(orjson.dumps(taken_over.to_json()))).route is Route.FLEX
    older = {k: v for k, v in StoredResult(status=OutcomeStatus.SUCCEEDED).to_json().items() if k != "route"}
    assert StoredResult.from_json(older).route is Route.BATCH


def test_a_summary_keeps_the_take_over_cost_and_reads_older_ones_as_none() -> None:
    summary = BatchSummary(
        items={(StepStatus.COMPLETED, ItemOutcome.FINISHED): 3},
        cost=Costs(usd=1.5, without_batch_usd=2.0, cache_savings_usd=0.1, takeover_usd=0.25),
    )
    assert BatchSummary.from_json(orjson.loads(orjson.dumps(summary.to_json()))) == summary
    version_1 = {"schema_version": 1, "items": [["completed", "finished", 3]], "usage": None, "cost": [1.5, 2.0, 0.1]}
    assert BatchSummary.from_json(version_1).cost == Costs(usd=1.5, without_batch_usd=2.0, cache_savings_usd=0.1)
