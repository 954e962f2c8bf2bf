"""The cache policy (``domain/caching.py``): the lifetime of each breakpoint of a request, a pure
function of what is expected of the prefix's readers, chosen per task shape."""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict

import pytest

from nightshift.domain.caching import (
    NO_CACHE,
    CachePlan,
    CachePolicy,
    CacheTtl,
    Outlook,
    Task,
    cheapest,
    plan,
    prefix_cost,
    turns_per_input,
)
from nightshift.domain.messages import MessageKind, Role
from support.messages import msg

HOUR, FIVE = CacheTtl.ONE_HOUR, CacheTtl.FIVE_MINUTES


class Timing(TypedDict):
    next_request_in: timedelta
    spread: timedelta


# A batch step: the provider's batches usually take half an hour.
BATCH = Timing(next_request_in=timedelta(minutes=30), spread=timedelta(minutes=30))
# A call through the normal API: the next request follows within seconds.
CALL = Timing(next_request_in=timedelta(seconds=5), spread=timedelta(0))


def auto(later: float, *, tools: int = 1, system: int = 1, timing: Timing = BATCH) -> CachePlan:
    """The plan of an agent's first request, ``later`` more expected (it made ``later + 1`` before)."""
    task = Task(usual=later + 1)
    return plan(CachePolicy.AUTO, task, tools_sharers=tools, system_sharers=system, **timing)


def test_an_agent_that_answers_once_alone_writes_nothing() -> None:
    # Any write would be a loss: nothing reads it back.
    assert auto(0) == NO_CACHE
    assert auto(0, timing=CALL) == NO_CACHE


def test_a_prefix_the_whole_step_shares_is_written_for_five_minutes_once_read_by_the_others() -> None:
    # 1,000 agents with the same tools and system, one step: one write, 999 reads, seconds apart.
    assert auto(0, tools=1_000, system=1_000) == CachePlan(tools=FIVE, system=FIVE)
    # Shared by the tools only (each agent's memory is in its system prompt).
    assert auto(0, tools=1_000) == CachePlan(tools=FIVE)


def test_an_agent_of_several_steps_in_batches_writes_for_an_hour() -> None:
    # Its next request is a batch turnaround (30 min) away: a five-minute entry is gone by then.
    assert auto(2) == CachePlan.everywhere(HOUR)


def test_an_agent_of_several_steps_in_calls_writes_for_five_minutes() -> None:
    assert auto(2, timing=CALL) == CachePlan.everywhere(FIVE)


def test_one_more_request_does_not_pay_for_an_hour_alone() -> None:
    # One read within the hour: 2 + 0.1 against 1 + 1 uncached.
    assert auto(1) == NO_CACHE
    assert prefix_cost(HOUR, Outlook(later_requests=1, **BATCH)) > prefix_cost(None, Outlook(later_requests=1))


def test_an_hour_follows_no_five_minute_mark() -> None:
    # A shared tools prefix alone would be cheapest rewritten each step for five minutes, but the
    # agent's own history wants an hour: Anthropic refuses an hour after five minutes.
    chosen = auto(2, tools=1_000, system=1)
    assert chosen == CachePlan.everywhere(HOUR)
    assert CachePlan.ordered(FIVE, None, HOUR) == CachePlan(tools=HOUR, system=None, history=HOUR)
    assert CachePlan.ordered(HOUR, FIVE, None) == CachePlan(tools=HOUR, system=FIVE)


def test_sharers_spread_over_a_long_batch_still_read_each_others_entry() -> None:
    # Two agents over a 30-minute batch are 15 minutes apart: a five-minute write is gone, an
    # hour's is read; 1,000 are seconds apart, and each read keeps the entry alive.
    two = Outlook(sharers=2, **BATCH)
    assert prefix_cost(FIVE, two) == pytest.approx(1.25)
    assert prefix_cost(HOUR, two) == pytest.approx((2 + 0.1) / 2)
    assert cheapest(two) is None  # 1.05 per agent, against 1 uncached
    assert cheapest(Outlook(sharers=1_000, **BATCH)) is FIVE


@pytest.mark.parametrize("policy", [CachePolicy.ONE_HOUR, CachePolicy.FIVE_MINUTES])
def test_a_fixed_policy_marks_every_breakpoint_whatever_is_expected(policy: CachePolicy) -> None:
    ttl = CacheTtl(policy.value)
    for later in (0, 5):
        assert plan(policy, Task(usual=later + 1), **BATCH) == CachePlan(tools=ttl, system=ttl, history=ttl)
    assert plan(CachePolicy.OFF, Task(usual=6), tools_sharers=1_000, **BATCH) == NO_CACHE


def test_auto_is_never_dearer_than_a_fixed_lifetime_by_its_own_measure() -> None:
    for later in (0, 0.5, 1, 2, 9):
        for sharers in (1, 2, 10, 10_000):
            for timing in (BATCH, CALL):
                outlook = Outlook(later_requests=later, sharers=sharers, **timing)
                best = prefix_cost(cheapest(outlook), outlook)
                assert all(best <= prefix_cost(ttl, outlook) for ttl in (None, FIVE, HOUR))


def test_an_agent_is_expected_to_take_as_many_turns_as_it_took_before() -> None:
    user, assistant, tool = Role.USER, Role.ASSISTANT, Role.TOOL
    heartbeat = msg(user, "continue", kind=MessageKind.HEARTBEAT)
    earlier_task = [msg(user, "plan my week"), msg(assistant), msg(tool), heartbeat, msg(assistant), msg(tool)]
    earlier_task += [heartbeat, msg(assistant)]  # three turns for one input
    window = [msg(assistant, "hello"), *earlier_task, msg(user, "and next week?")]

    assert turns_per_input(window) == 3  # the greeting before any input is not a task's

    def later(step_number: int, max_steps: int = 10) -> float:
        return Task.of(window, step_number=step_number, max_steps=max_steps).later_requests()

    assert later(0) == 2
    assert later(2) == 0  # its third turn, the usual last
    assert later(4) == 1  # ran past the usual: maybe one more
    assert later(0, max_steps=2) == 1  # no more than its steps allow


def test_a_new_agent_is_expected_to_go_on_as_long_as_it_has_gone() -> None:
    window = [msg(Role.USER, "first"), msg(Role.USER, "inputs in a row are one")]
    assert turns_per_input(window) is None
    assert Task.of(window, step_number=0, max_steps=10).later_requests() == 0
    assert Task.of(window, step_number=3, max_steps=10).later_requests() == 3


def test_a_mark_whose_entry_is_still_there_is_kept_to_the_end_of_the_task() -> None:
    # Three turns expected: an hour's write at the first; the second and third expect too little
    # to write anew, but read what the first wrote (a tenth of the price) and keep it alive.
    steps = [plan(CachePolicy.AUTO, Task(usual=3, step_number=s), **BATCH) for s in range(3)]
    assert steps == [CachePlan.everywhere(HOUR)] * 3
    # A new agent: nothing at first, one more expected at its second (not worth an hour), then an hour.
    new = [plan(CachePolicy.AUTO, Task(step_number=s), **BATCH) for s in range(4)]
    assert new == [NO_CACHE, NO_CACHE, CachePlan.everywhere(HOUR), CachePlan.everywhere(HOUR)]
    # In calls, seconds apart: five minutes, kept likewise.
    assert plan(CachePolicy.AUTO, Task(usual=3, step_number=2), **CALL) == CachePlan.everywhere(FIVE)
