"""When an agent's window calls for a notice or a summary, and what a summary evicts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nightshift.domain.agents import LLMConfig
from nightshift.domain.context_window import (
    PRESSURE,
    TARGET,
    TRIGGER,
    Pressure,
    SummaryPlan,
    answer_room,
    choose_eviction,
    pressure,
    prompt_room,
    summary_notice,
    summary_tokens,
)
from nightshift.domain.messages import Role

CONFIG = LLMConfig(provider="anthropic", model="m", context_window=10_000, max_tokens=1_000)
USER, ASSISTANT, TOOL = Role.USER, Role.ASSISTANT, Role.TOOL


def test_the_answer_keeps_its_room_and_at_most_a_quarter_of_the_window() -> None:
    assert answer_room(CONFIG) == 1_000 and prompt_room(CONFIG) == 9_000
    small = LLMConfig(provider="anthropic", model="m", context_window=2_000, max_tokens=4_096)
    assert answer_room(small) == 500 and prompt_room(small) == 1_500


@pytest.mark.parametrize(
    ("before", "tokens", "expected"),
    [
        (1_000, 2_000, Pressure.NONE),
        (int(PRESSURE * 9_000), int(PRESSURE * 9_000) + 1, Pressure.NOTICE),  # just went past the threshold
        (int(PRESSURE * 9_000) + 1, int(PRESSURE * 9_000) + 500, Pressure.NONE),  # told already, on the way up
        (None, int(PRESSURE * 9_000) + 500, Pressure.NONE),  # no last request to compare with
        (1_000, int(TRIGGER * 9_000) + 1, Pressure.SUMMARIZE),
        (None, 20_000, Pressure.SUMMARIZE),
    ],
)
def test_pressure_notices_once_on_the_way_up_and_summarizes_past_the_trigger(
    before: int | None, tokens: int, expected: Pressure
) -> None:
    assert pressure(CONFIG, tokens, before=before) is expected


def test_the_fewest_oldest_messages_are_evicted_that_bring_the_window_to_its_target() -> None:
    # system and tools: 2,000; then ten exchanges of a call (100) and its result (700)
    window = [(USER, 100)] + [(ASSISTANT, 100), (TOOL, 700)] * 10 + [(USER, 50)]
    total = 2_000 + sum(t for _, t in window)

    cut = choose_eviction(window, total=total, config=CONFIG)

    assert cut is not None
    kept = window[cut:]
    assert kept[0][0] is not TOOL  # a call and its result leave together
    assert 2_000 + summary_tokens(CONFIG) + sum(t for _, t in kept) <= TARGET * prompt_room(CONFIG)
    # one message fewer evicted would not have been enough (or would split an exchange)
    shorter = next(c for c in range(cut - 1, 0, -1) if window[c][0] is not TOOL)
    assert 2_000 + summary_tokens(CONFIG) + sum(t for _, t in window[shorter:]) > TARGET * prompt_room(CONFIG)


def test_the_last_turn_and_its_results_are_never_evicted() -> None:
    # One huge exchange at the end: all that may go is what came before it.
    window = [(USER, 100), (ASSISTANT, 100), (TOOL, 1_500), (ASSISTANT, 100), (TOOL, 6_000), (USER, 50)]

    cut = choose_eviction(window, total=1_000 + sum(t for _, t in window), config=CONFIG)

    assert cut == 3  # the first exchange goes, the last call with its result stays


def test_an_eviction_that_frees_less_than_the_summary_takes_is_none() -> None:
    window = [(USER, 20), (ASSISTANT, 20), (TOOL, 20), (ASSISTANT, 100), (TOOL, 8_000)]

    assert choose_eviction(window, total=9_500, config=CONFIG) is None
    assert choose_eviction([(USER, 9_000)], total=9_500, config=CONFIG) is None  # nothing to evict


def test_a_summary_plan_reads_back_as_it_was_written() -> None:
    plan = SummaryPlan(evicted=("message-1", "message-2"), evicted_tokens=900, model="anthropic/m", max_tokens=512)

    assert SummaryPlan.from_json(plan.to_json()) == plan


def test_the_summary_message_says_what_left_and_where_to_find_it() -> None:
    text = summary_notice("I read pages 1 to 9.", evicted=18, now=datetime(2026, 12, 1, tzinfo=UTC))

    assert "18 earlier messages" in text and "conversation_search" in text and "I read pages 1 to 9." in text
