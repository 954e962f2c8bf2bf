"""The worker's decisions (``batch.decisions``) with plain values: who goes on, how an item and a run end."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from nightshift.batch.decisions import TRANSIENT_RETRIES, final_status, next_step
from nightshift.batch.outcomes import failed_result
from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.batch_progress import BatchRunProgress
from nightshift.domain.batches import BatchItem, BatchRunStatus, ItemOutcome, RequestStatus, StepState, StepStatus
from nightshift.domain.context_window import SummaryPlan
from nightshift.domain.solver import Reason
from nightshift.providers.base import ModelError
from nightshift.runtime.step import TurnResult

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def agent(agent_id: str) -> Agent:
    config = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022")
    return Agent(
        id=agent_id, organization_id="o", name=agent_id, system="s", llm_config=config, created_at=NOW, updated_at=NOW
    )


def item(
    agent_id: str, status: RequestStatus = RequestStatus.COMPLETED, *, retries: int = 0, **fields: Any
) -> BatchItem:
    return BatchItem(
        id=f"item-{agent_id}",
        organization_id="o",
        batch_run_id="run",
        provider_batch_id="pb",
        agent_id=agent_id,
        request_status=status,
        step_status=StepStatus.PAUSED,
        step_state=StepState(step_number=1, retries=retries),
        created_at=NOW,
        updated_at=NOW,
        **fields,
    )


def errored(agent_id: str, kind: str, *, retries: int = 0) -> BatchItem:
    stored = failed_result(f"item-{agent_id}", f"{kind}: no", ModelError(type=kind, message="no"))
    return item(agent_id, RequestStatus.FAILED, retries=retries, result=stored.result, error=stored.error)


def turn(agent_id: str, *, continues: bool, failure: str | None = None) -> TurnResult:
    reason = Reason.HEARTBEAT if continues else Reason.NO_HEARTBEAT
    return TurnResult(
        agent_id=agent_id,
        messages=(),
        continues=continues,
        reason=reason,
        state=StepState(step_number=2),
        failure=failure,
    )


def test_answered_agents_go_on_or_finish() -> None:
    items = [item("a"), item("b")]
    results = {"a": turn("a", continues=True), "b": turn("b", continues=False)}

    completions, entries = next_step(items, results, {"a": agent("a"), "b": agent("b")}, run_open=True)

    assert [(c.item_id, c.outcome) for c in completions] == [
        ("item-a", ItemOutcome.CONTINUED),
        ("item-b", ItemOutcome.FINISHED),
    ]
    (entry,) = entries
    assert (entry.agent.id, entry.heartbeat, entry.state.step_number) == ("a", True, 2)


def test_a_closed_run_takes_no_further_step() -> None:
    completions, entries = next_step([item("a")], {"a": turn("a", continues=True)}, {"a": agent("a")}, run_open=False)

    assert [c.outcome for c in completions] == [ItemOutcome.FINISHED]
    assert entries == []


def test_a_turn_that_could_not_be_taken_fails_its_agent_with_the_reason() -> None:
    results = {"a": turn("a", continues=False, failure="the agent's turn could not be applied: KeyError")}

    completions, entries = next_step([item("a")], results, {"a": agent("a")}, run_open=True)

    assert [(c.outcome, c.error) for c in completions] == [
        (ItemOutcome.FAILED, "the agent's turn could not be applied: KeyError")
    ]
    assert entries == []


def test_transient_errors_are_retried_then_fail() -> None:
    fresh, spent = errored("a", "rate_limit_error"), errored("b", "overloaded_error", retries=TRANSIENT_RETRIES)
    permanent = errored("c", "invalid_request_error")

    completions, entries = next_step([fresh, spent, permanent], {}, {x: agent(x) for x in "abc"}, run_open=True)

    assert [c.outcome for c in completions] == [ItemOutcome.RETRIED, ItemOutcome.FAILED, ItemOutcome.FAILED]
    assert completions[2].error == "invalid_request_error: no"
    (entry,) = entries
    assert (entry.agent.id, entry.heartbeat, entry.state.retries, entry.state.step_number) == ("a", False, 1, 1)


def test_an_agent_deleted_meanwhile_fails_and_is_not_retried() -> None:
    completions, entries = next_step([errored("gone", "rate_limit_error"), item("gone2")], {}, {}, run_open=True)

    assert [(c.outcome, c.error) for c in completions] == [
        (ItemOutcome.FAILED, "rate_limit_error: no"),
        (ItemOutcome.FAILED, "agent gone2 no longer exists"),
    ]
    assert entries == []


def test_a_run_ends_completed_when_any_agent_finished() -> None:
    assert (
        final_status(BatchRunProgress(outcomes={ItemOutcome.FINISHED: 1, ItemOutcome.FAILED: 9}))
        is BatchRunStatus.COMPLETED
    )
    assert (
        final_status(BatchRunProgress(outcomes={ItemOutcome.FAILED: 3, ItemOutcome.CANCELLED: 1}))
        is BatchRunStatus.FAILED
    )


def test_a_run_whose_every_agent_left_it_ends_cancelled() -> None:
    assert (
        final_status(BatchRunProgress(outcomes={ItemOutcome.CONTINUED: 2, ItemOutcome.CANCELLED: 2}))
        is BatchRunStatus.CANCELLED
    )
    assert final_status(BatchRunProgress(outcomes={ItemOutcome.CONTINUED: 1})) is BatchRunStatus.FAILED


def test_a_summarized_agent_goes_on_with_its_state_as_it_was_unless_the_run_was_cancelled() -> None:
    plan = SummaryPlan(evicted=("message-1",), evicted_tokens=500, model="anthropic/m", max_tokens=256)
    waiting = replace(item("a"), step_state=StepState(step_number=3, retries=1, summary=plan))
    agents = {"a": agent("a")}

    completions, entries = next_step([waiting], {}, agents, run_open=True, summarized={"a"})
    (cancelled,), none = next_step([waiting], {}, agents, run_open=False, summarized={"a"})

    assert [c.outcome for c in completions] == [ItemOutcome.SUMMARIZED]
    (entry,) = entries
    assert entry.state == StepState(step_number=3) and not entry.heartbeat and entry.inputs == ()
    assert cancelled.outcome is ItemOutcome.CANCELLED and none == []
