"""The worker's decisions, as pure functions over plain values: who goes on, how a run ends.

Nothing here reads or writes the database; ``worker`` and ``steps`` gather the values, call these,
and write what they decide.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from nightshift.domain.agents import Agent
from nightshift.domain.batch_progress import BatchRunProgress
from nightshift.domain.batches import BatchItem, BatchRunStatus, ItemCompletion, ItemOutcome, RequestStatus, StepState
from nightshift.domain.fast_init import fast_init
from nightshift.domain.messages import UserInput
from nightshift.runtime.step import TurnReason, TurnResult

# Transient per-request errors (rate limits, overload) are retried in the next step this often.
TRANSIENT_RETRIES = 2


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepEntry:
    """One agent going into a step: its state and whether it gets a heartbeat or the user's inputs.

    ``last_request_tokens``: the size of the request its last step sent, when known.
    """

    agent: Agent
    state: StepState
    inputs: tuple[UserInput, ...] = ()
    heartbeat: bool = False
    last_request_tokens: int | None = None


def next_step(
    items: Sequence[BatchItem],
    results: Mapping[str, TurnResult],
    agents: Mapping[str, Agent],
    *,
    run_open: bool,
    summarized: Collection[str] = (),
) -> tuple[list[ItemCompletion], list[StepEntry]]:
    """How each item of an applied provider batch ends, and who goes into the next step.

    Args:
        items: The provider batch's items.
        results: Each answered agent's turn, by agent id.
        agents: The agents as they are now (an agent deleted meanwhile is missing).
        run_open: Whether the run may still take steps (it was not cancelled).
        summarized: The agents whose summary this batch brought: their step goes on, in the
            run's next step, with its state as it was (no input: it is in the window already).

    Returns:
        One completion per item, in ``items``' order, and the entries of the next step: agents
        whose turn goes on, and agents whose request failed for a reason that may pass (sent
        again with the same state, ``TRANSIENT_RETRIES`` times at most).
    """
    completions: list[ItemCompletion] = []
    entries: list[StepEntry] = []
    for item in items:
        agent = agents.get(item.agent_id)
        result = results.get(item.agent_id)
        if item.agent_id in summarized and agent is not None:
            outcome = ItemOutcome.SUMMARIZED if run_open else ItemOutcome.CANCELLED
            completions.append(ItemCompletion(item_id=item.id, outcome=outcome))
            if run_open:
                entries.append(StepEntry(agent=agent, state=replace(item.step_state, summary=None, retries=0)))
            continue
        if result is not None and result.failure is not None:
            completions.append(ItemCompletion(item_id=item.id, outcome=ItemOutcome.FAILED, error=result.failure))
            continue
        if result is not None:
            goes_on = result.continues and run_open
            outcome = ItemOutcome.CONTINUED if goes_on else ItemOutcome.FINISHED
            if result.reason is TurnReason.REQUIRES_APPROVAL:
                outcome = ItemOutcome.NEEDS_APPROVAL  # it leaves the run until the client answers
            completions.append(ItemCompletion(item_id=item.id, outcome=outcome, error=result.tool_error))
            if goes_on and agent is not None:
                entries.append(
                    StepEntry(
                        agent=agent,
                        state=result.state,
                        heartbeat=result.heartbeat,
                        last_request_tokens=result.request_tokens,
                    )
                )
            continue
        error = item.result.error if item.result else None
        retry = (
            run_open
            and agent is not None
            and item.request_status is RequestStatus.FAILED
            and error is not None
            and error.retryable
            and item.step_state.retries < TRANSIENT_RETRIES
        )
        if retry and agent is not None:
            completions.append(ItemCompletion(item_id=item.id, outcome=ItemOutcome.RETRIED, error=item.error))
            entries.append(StepEntry(agent=agent, state=replace(item.step_state, retries=item.step_state.retries + 1)))
        else:
            reason = item.error or (f"agent {item.agent_id} no longer exists" if agent is None else "no result")
            completions.append(ItemCompletion(item_id=item.id, outcome=ItemOutcome.FAILED, error=reason))
    return completions, entries


def final_status(progress: BatchRunProgress) -> BatchRunStatus:
    """How a run with nothing left open ends: completed if any agent finished (or stopped for an
    approval, which is no failure); cancelled if none failed either and some were cancelled alone
    (their part of it cancelled, or deleted); else failed."""
    if progress.count(ItemOutcome.FINISHED) + progress.count(ItemOutcome.NEEDS_APPROVAL):
        return BatchRunStatus.COMPLETED
    if progress.count(ItemOutcome.CANCELLED) and not progress.count(ItemOutcome.FAILED):
        return BatchRunStatus.CANCELLED
    return BatchRunStatus.FAILED
