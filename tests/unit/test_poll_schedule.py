"""The poll schedule of a running provider batch (``domain/polling.py``): a pure function of its
age and of the turnaround its provider's batches showed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nightshift.domain.polling import AGE_SHARE, MIN_OBSERVED, WINDOW_POLLS, Turnaround, Turnarounds, poll_delay

SHORTEST = timedelta(seconds=5)
# A long interval: the schedule, not the interval, decides where the polls go.
LONGEST = timedelta(minutes=10)
# Batches that usually end between 20 and 40 minutes after their submit.
USUAL = Turnaround(p10=timedelta(minutes=20), p50=timedelta(minutes=30), p90=timedelta(minutes=40))


def minutes(value: float) -> timedelta:
    return timedelta(minutes=value)


def delay(age: timedelta, turnaround: Turnaround | None = USUAL) -> timedelta:
    return poll_delay(age, turnaround, shortest=SHORTEST, longest=LONGEST)


def polls_between(start: timedelta, end: timedelta, turnaround: Turnaround | None = USUAL) -> int:
    """How many polls the schedule makes of a batch between these two ages."""
    age, polls = start, 0
    while age < end:
        age += delay(age, turnaround)
        polls += 1
    return polls


def test_a_young_batch_is_polled_at_the_shortest_gap_then_less_often_as_it_ages() -> None:
    assert delay(timedelta(0), None) == SHORTEST
    assert delay(timedelta(seconds=10), None) == SHORTEST
    assert delay(timedelta(seconds=100), None) == timedelta(seconds=100) * AGE_SHARE
    assert delay(minutes(60), None) == LONGEST
    assert delay(minutes(60)) == LONGEST  # past the usual end, too


def test_no_gap_is_under_the_shortest_or_over_the_longest() -> None:
    for seconds in (0, 1, 7, 59, 300, 1_199, 1_200, 1_800, 2_400, 2_401, 7_200, 86_400):
        for turnaround in (None, USUAL):
            assert SHORTEST <= delay(timedelta(seconds=seconds), turnaround) <= LONGEST


def test_equal_bounds_are_the_fixed_interval_of_before() -> None:
    for seconds in (0, 30, 1_500, 3_000):
        assert poll_delay(timedelta(seconds=seconds), USUAL, shortest=LONGEST, longest=LONGEST) == LONGEST
    # A shortest gap over the longest is the longest: the interval bounds every gap.
    assert poll_delay(timedelta(0), None, shortest=minutes(15), longest=LONGEST) == LONGEST


def test_the_usual_end_is_polled_more_often_than_the_long_middle_before_it() -> None:
    before, inside, after = delay(minutes(15)), delay(minutes(30)), delay(minutes(50))
    assert inside < before and inside < after
    assert inside == max(SHORTEST, (USUAL.p90 - USUAL.p10) / WINDOW_POLLS)
    # Twenty minutes of the window get more polls than the ten minutes before it, and the ten after.
    assert polls_between(minutes(20), minutes(40)) > polls_between(minutes(10), minutes(20))
    assert polls_between(minutes(20), minutes(40)) > polls_between(minutes(40), minutes(50))


def test_the_poll_before_the_window_lands_as_it_opens() -> None:
    assert delay(USUAL.p10 - timedelta(seconds=8)) == timedelta(seconds=8)
    age = minutes(15)
    while age < USUAL.p10:
        age += delay(age)
    assert age == USUAL.p10


def test_the_schedule_of_a_fixed_interval_is_never_slower() -> None:
    """Over a day, the schedule asks at least as often as every LONGEST would, and its extra polls
    go to the batch's first minutes and to the usual end: a quarter more in all."""
    day = timedelta(days=1)
    fixed = day / LONGEST
    assert fixed <= polls_between(timedelta(0), day) <= fixed * 1.25
    assert fixed <= polls_between(timedelta(0), day, None) <= fixed * 1.25
    assert polls_between(timedelta(0), minutes(5)) > polls_between(minutes(5), USUAL.p10)


def test_a_turnaround_needs_enough_ends_and_reads_their_spread() -> None:
    assert Turnaround.of([minutes(1)] * (MIN_OBSERVED - 1)) is None
    seen = Turnaround.of([minutes(m) for m in range(1, 101)])
    assert seen is not None
    assert seen.p10 == pytest.approx(minutes(10.9), abs=timedelta(seconds=1))
    assert seen.p50 == minutes(50.5)
    assert seen.p90 == pytest.approx(minutes(90.1), abs=timedelta(seconds=1))
    same = Turnaround.of([minutes(3)] * MIN_OBSERVED)
    assert same == Turnaround(p10=minutes(3), p50=minutes(3), p90=minutes(3))


def test_a_models_turnaround_once_it_has_enough_ends_else_its_providers() -> None:
    minutes = [timedelta(minutes=m) for m in range(1, 6)]
    seen = Turnarounds.of(
        {
            ("anthropic", "claude-haiku"): minutes,  # five ends: a spread of its own
            ("anthropic", "claude-opus"): [timedelta(hours=1)],  # one: its provider's
            ("anthropic", None): [timedelta(hours=2)] * 4,  # batches of several models: the provider's alone
        }
    )
    assert seen.providers["anthropic"][0] == 10
    assert set(seen.models) == {("anthropic", "claude-haiku"), ("anthropic", "claude-opus")}
    haiku = seen.get("anthropic", "claude-haiku")
    assert haiku is not None and haiku.p50 == timedelta(minutes=3)
    provider = seen.get("anthropic")
    assert provider is not None and seen.get("anthropic", "claude-opus") == provider != haiku
    assert seen.get("openai", "gpt-4o") is None
