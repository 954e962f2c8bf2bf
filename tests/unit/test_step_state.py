"""A step state is versioned JSON: today's reads back as it was, an older one is upgraded."""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.domain.batches import STEP_STATE_VERSION, StepState
from nightshift.domain.context_window import SummaryPlan
from nightshift.domain.solver import SolverState
from nightshift.domain.versions import upgrade_state


def test_a_state_reads_back_as_it_was_written() -> None:
    state = StepState(step_number=3, max_steps=7, allowed_tools=("send_message",), retries=1)

    assert StepState.from_json(state.to_json()) == state
    assert state.to_json()["schema_version"] == STEP_STATE_VERSION


def test_a_state_waiting_for_a_summary_reads_back_and_a_version_1_state_waits_for_none() -> None:
    plan = SummaryPlan(evicted=("message-1",), evicted_tokens=300, model="anthropic/m", max_tokens=256)
    state = StepState(step_number=4, max_steps=9, summary=plan)
    version_1 = {k: v for k, v in state.to_json().items() if k != "summary"} | {"schema_version": 1}

    assert StepState.from_json(state.to_json()) == state
    assert StepState.from_json(version_1) == StepState(step_number=4, max_steps=9)


def test_older_states_are_upgraded_one_version_at_a_time() -> None:
    # What a future version 3 could be: version 1 named the limit "limit", version 2 added retries.
    upgrades = {
        1: lambda data: {**{k: v for k, v in data.items() if k != "limit"}, "max_steps": data["limit"]},
        2: lambda data: {**data, "retries": 0},
    }
    old: dict[str, Any] = {"schema_version": 1, "step_number": 2, "limit": 5, "solver": SolverState().to_json()}

    upgraded = upgrade_state(old, upgrades, current=3)

    assert upgraded == {"schema_version": 3, "step_number": 2, "max_steps": 5, "retries": 0, "solver": old["solver"]}
    assert upgrade_state(upgraded, upgrades, current=3) == upgraded  # current already: unchanged


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (STEP_STATE_VERSION + 1, "is newer than this nightshift's"),
        (0, "no upgrade of step state schema_version 0"),
        (None, "without a schema_version"),
    ],
)
def test_states_it_cannot_read_say_why(version: int | None, message: str) -> None:
    data = {**StepState().to_json(), "schema_version": version}

    with pytest.raises(ValueError, match=message):
        StepState.from_json(data)
