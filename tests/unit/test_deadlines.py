"""When a step's batch stops being waited on for its run's deadline (``domain/deadlines.py``), and
how a take-over is recorded: the route of an answer, the take-over's cost in a batch's summary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from nightshift.domain.answers import OutcomeStatus, Route, StoredResult
from nightshift.domain.batches import BatchSummary, Costs, ItemOutcome, StepStatus
from nightshift.domain.deadlines import MIN_TAIL_WAIT, Takeover, Waiting, in_tail

SUBMITTED = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def waiting(deadline_in: timedelta, tail_after: timedelta | None = None) -> Waiting:
    tail_at = SUBMITTED + tail_after if tail_after is not None else None
    return Waiting(deadline=SUBMITTED + deadline_in, submitted_at=SUBMITTED, tail_at=tail_at)


def test_a_step_waits_for_half_the_time_its_submit_left() -> None:
    ten = waiting(10 * MINUTE)
    assert ten.take_over_at == SUBMITTED + 5 * MINUTE
    assert ten.reason(SUBMITTED + 4 * MINUTE) is None
    assert ten.reason(SUBMITTED + 5 * MINUTE) is Takeover.DEADLINE
    # A day away: half a day; the later steps keep the other half, however many they are.
    assert waiting(timedelta(days=1)).take_over_at == SUBMITTED + timedelta(hours=12)


def test_a_step_submitted_past_its_deadline_is_taken_over_at_once() -> None:
    late = waiting(-MINUTE)
    assert late.reason(SUBMITTED) is Takeover.DEADLINE


def test_a_tail_may_last_half_as_long_as_the_bulk_and_a_minute_at_least() -> None:
    # The bulk took 20 minutes: the tail is waited on for 10 more, well before the deadline's share.
    slow_bulk = waiting(timedelta(hours=24), tail_after=20 * MINUTE)
    assert slow_bulk.take_over_at == SUBMITTED + 30 * MINUTE
    assert slow_bulk.reason(SUBMITTED + 29 * MINUTE) is None
    assert slow_bulk.reason(SUBMITTED + 30 * MINUTE) is Takeover.TAIL
    # A bulk of ten seconds: a minute for its tail.
    quick_bulk = waiting(timedelta(hours=24), tail_after=timedelta(seconds=10))
    assert quick_bulk.take_over_at == SUBMITTED + timedelta(seconds=10) + MIN_TAIL_WAIT
    # Whichever comes first: the deadline's share ends before the tail's wait does.
    assert waiting(10 * MINUTE, tail_after=4 * MINUTE).reason(SUBMITTED + 5 * MINUTE) is Takeover.DEADLINE


def test_a_tail_is_a_few_requests_still_open() -> None:
    assert in_tail({"processing": 2, "succeeded": 98, "errored": 0, "canceled": 0, "expired": 0})
    assert in_tail({"processing": 5, "succeeded": 90, "errored": 5})
    assert not in_tail({"processing": 6, "succeeded": 94})
    assert not in_tail({"processing": 0, "succeeded": 100})  # over: no tail
    assert not in_tail({})


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
