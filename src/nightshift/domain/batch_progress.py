"""What a run's provider batches add up to: each batch's summary, a run's progress read from them,
an organization's costs by kind of run, and the census the metrics report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nightshift.domain.batches import (
    BatchRun,
    BatchRunKind,
    BatchRunStatus,
    ItemOutcome,
    ProviderBatchStatus,
    StepStatus,
)
from nightshift.domain.costs import Costs
from nightshift.domain.usage import Usage
from nightshift.domain.versions import Upgrade, upgrade_state


@dataclass(frozen=True, slots=True, kw_only=True)
class KindCosts:
    """What an organization's batch runs of one kind cost: runs, the agents they stepped, answered
    requests, their tokens (None when no request was answered) and their costs."""

    kind: BatchRunKind
    runs: int = 0
    agents: int = 0
    requests: int = 0
    usage: Usage | None = None
    cost: Costs = field(default_factory=Costs)


SUMMARY_VERSION = 2
# Version 2 adds the take-over's cost to the costs (none before).
SUMMARY_UPGRADES: dict[int, Upgrade] = {
    1: lambda data: {**data, "cost": [*data["cost"], 0.0]},
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSummary:
    """What a provider batch's items add up to, as its run's progress counts them.

    Stored on the batch as versioned JSON with its items, and again when their results are all in
    (the batch ended) and when they are final (the batch applied, or cancelled), each time in the
    transaction that made it so (see ``store/batch_summaries.py``). ``items`` counts them by (step
    status, outcome). ``usage`` and ``cost`` are their sums; ``usage``
    is None when no item has a usage at all, and the batch is then left out of its run's
    per-batch figures.
    """

    items: Mapping[tuple[StepStatus, ItemOutcome | None], int] = field(default_factory=dict)
    usage: Usage | None = None
    cost: Costs = field(default_factory=Costs)

    @classmethod
    def of_new_items(cls, count: int) -> BatchSummary:
        """A batch just written with ``count`` items: all paused, with no result yet."""
        return cls(items={(StepStatus.PAUSED, None): count})

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SUMMARY_VERSION,
            "items": [[step.value, outcome.value if outcome else None, n] for (step, outcome), n in self.items.items()],
            "usage": self.usage.to_json() if self.usage is not None else None,
            "cost": [self.cost.usd, self.cost.without_batch_usd, self.cost.cache_savings_usd, self.cost.takeover_usd],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchSummary:
        """Read a stored summary.

        Raises:
            ValueError: A summary of a newer version (written by a newer nightshift).
        """
        data = upgrade_state(data, SUMMARY_UPGRADES, current=SUMMARY_VERSION)
        usd, without_batch_usd, cache_savings_usd, takeover_usd = data["cost"]
        return cls(
            items={
                (StepStatus(step), ItemOutcome(outcome) if outcome else None): int(n)
                for step, outcome, n in data["items"]
            },
            usage=Usage.from_json(data["usage"]) if data["usage"] is not None else None,
            cost=Costs(
                usd=usd,
                without_batch_usd=without_batch_usd,
                cache_savings_usd=cache_savings_usd,
                takeover_usd=takeover_usd,
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRunProgress:
    """Where a run is: its items by outcome (``running``: not yet applied), its step, tokens and cost."""

    running: int = 0
    outcomes: dict[ItemOutcome, int] = field(default_factory=dict)
    step: int = 0
    usage: Usage | None = None  # None: no item has a usage yet
    cost: Costs = field(default_factory=Costs)
    # Per provider batch (by our batch id): what each step used and cost, for the run's chart.
    batch_usage: dict[str, Usage] = field(default_factory=dict)
    batch_cost: dict[str, Costs] = field(default_factory=dict)

    def count(self, outcome: ItemOutcome) -> int:
        """How many items ended with ``outcome``."""
        return self.outcomes.get(outcome, 0)

    @classmethod
    def before_first_step(cls, run: BatchRun) -> BatchRunProgress:
        """A run with no step written: its queued agents are running while it waits for a poller,
        and cancelled if it was cancelled then. One that failed before its first step counts none:
        its agents were deleted meanwhile, or the step could not be written (its error says)."""
        if run.status is BatchRunStatus.CREATED:
            return cls(running=run.queued_agents)
        if run.status is BatchRunStatus.CANCELLED and run.queued_agents:
            return cls(outcomes={ItemOutcome.CANCELLED: run.queued_agents})
        return cls()

    @classmethod
    def of(cls, batches: Iterable[tuple[str, int, BatchSummary]]) -> BatchRunProgress:
        """A run's progress from its provider batches' (id, step number, summary).

        The sums are added in the order of the batches' ids, so that the same batches give the
        same floats whatever order they come in.
        """
        running, step = 0, 0
        outcomes: Counter[ItemOutcome] = Counter()
        usage: Usage | None = None
        cost = Costs()
        batch_usage: dict[str, Usage] = {}
        batch_cost: dict[str, Costs] = {}
        for batch_id, step_number, summary in sorted(batches, key=lambda batch: batch[0]):
            for (step_status, outcome), count in summary.items.items():
                if count:
                    step = max(step, step_number)
                if step_status is StepStatus.PAUSED or outcome is None:
                    running += count
                else:
                    outcomes[outcome] += count
            if summary.usage is not None:
                usage = summary.usage if usage is None else usage + summary.usage
                batch_usage[batch_id] = summary.usage
                cost += summary.cost
                batch_cost[batch_id] = summary.cost
        return cls(
            running=running,
            outcomes=dict(outcomes),
            step=step,
            usage=usage,
            cost=cost,
            batch_usage=batch_usage,
            batch_cost=batch_cost,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchCensus:
    """The batch work of every organization at one moment, as the metrics report it.

    ``oldest_due_at`` is when the claimable provider batch that has been due longest became due
    (None when no batch is claimable); how late the pollers are is the time since then.
    """

    runs: Mapping[BatchRunStatus, int]
    provider_batches: Mapping[ProviderBatchStatus, int]
    agents_stepping: int  # agents in a step of a batch run that is not yet applied
    oldest_due_at: datetime | None
