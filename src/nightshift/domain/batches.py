"""Batch runs, provider batches and batch items: the state of stepping many agents at once.

State machines::

    BatchRun:       created -> running -> completed | failed | cancelled
    ProviderBatch:  created -> running -> ended -> applied
                    created | running -> cancelling -> cancelled         (the run was cancelled)
    BatchItem.request_status:  created -> running -> completed | failed | cancelled | expired
    BatchItem.step_status:     paused -> completed

A provider batch is one batch submitted to one provider for one step of some agents of a run.
A batch item is one agent inside one provider batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from nightshift.domain.answers import StoredResult
from nightshift.domain.approvals import ClientTool
from nightshift.domain.context_window import SummaryPlan
from nightshift.domain.costs import Costs
from nightshift.domain.fast_init import fast_init
from nightshift.domain.messages import Image, UserInput
from nightshift.domain.solver import SolverState
from nightshift.domain.usage import Usage
from nightshift.domain.versions import Upgrade, upgrade_state
from nightshift.errors import InvalidInput


class BatchRunStatus(StrEnum):
    """Status of a batch run (what the user created with one POST)."""

    CREATED = "created"  # persisted, first step not yet submitted -> running | failed
    RUNNING = "running"  # some provider batch of the run is open -> completed | failed | cancelled
    COMPLETED = "completed"  # every agent stopped and at least one succeeded (terminal)
    FAILED = "failed"  # every agent failed, or the run could not be submitted (terminal)
    CANCELLED = "cancelled"  # the user cancelled it; no further steps (terminal)


class BatchRunKind(StrEnum):
    """Whose agents a batch run steps: the user's, or sleep-time agents the poller gathered."""

    MAIN = "main"  # made by POST /v1/messages/batches
    SLEEPTIME = "sleeptime"  # made by the poller (or ``nightshift sleeptime run``) from due groups


class ProviderBatchStatus(StrEnum):
    """Our view of one provider batch."""

    CREATED = "created"  # persisted, not yet accepted by the provider -> running
    RUNNING = "running"  # accepted; polled until it ends -> ended | cancelling
    ENDED = "ended"  # the provider finished; every item's result is stored -> applied
    APPLIED = "applied"  # the results were applied to the agents (terminal)
    CANCELLING = "cancelling"  # the run was cancelled; the provider must be told -> cancelled
    CANCELLED = "cancelled"  # cancelled at the provider; its results are never applied (terminal)


class RequestStatus(StrEnum):
    """Status of one agent's request inside a provider batch."""

    CREATED = "created"  # persisted before submission -> running
    RUNNING = "running"  # submitted, no result yet -> completed | failed | cancelled | expired
    COMPLETED = "completed"  # the provider returned a message (terminal)
    FAILED = "failed"  # the provider returned an error for this request (terminal)
    CANCELLED = "cancelled"  # the batch was cancelled before this request ran (terminal)
    EXPIRED = "expired"  # the batch expired before this request ran (terminal)


class StepStatus(StrEnum):
    """Whether the agent's step for this item has been applied."""

    PAUSED = "paused"  # waiting for the provider's result -> completed
    COMPLETED = "completed"  # the result was applied (messages written, tools run) (terminal)


class ItemOutcome(StrEnum):
    """What an applied step did to its agent (``BatchItem.outcome``); every value is final."""

    CONTINUED = "continued"  # it answered and goes into the run's next step
    RETRIED = "retried"  # its request failed for a transient reason; it is sent again next step
    FINISHED = "finished"  # it answered and stops: its run is done for it
    FAILED = "failed"  # it stops without finishing (provider error, unbuildable request, ...)
    CANCELLED = "cancelled"  # its run was cancelled before this step was applied
    SUMMARIZED = "summarized"  # its window was summarized; its step follows in the run's next step
    # It called a tool that waits for the client (an approval, a client-side tool): it leaves the
    # run, its window holding the pending calls, until the client answers (``domain/approvals.py``).
    NEEDS_APPROVAL = "needs_approval"


TERMINAL_RUN_STATUSES = frozenset({BatchRunStatus.COMPLETED, BatchRunStatus.FAILED, BatchRunStatus.CANCELLED})
STEP_STATE_VERSION = 2


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepState:
    """Where one agent is in a run, persisted on its batch item as versioned JSON.

    ``allowed_tools`` are the tools the solver allowed for this step's request (kept so that a
    request rebuilt after a crash is the same request). ``retries`` counts transient provider
    errors retried so far. With ``summary`` the item's request is the summary of the agent's
    oldest messages, and its step waits for it (the step's number and state stay as they are).
    ``client_tools`` are the tools the request of the run offered that the client runs itself
    (a call of one parks the agent: ``domain/approvals.py``); an older state has none.
    """

    step_number: int = 0
    max_steps: int = 10
    solver: SolverState = field(default_factory=SolverState)
    allowed_tools: tuple[str, ...] = ()
    retries: int = 0
    summary: SummaryPlan | None = None
    client_tools: tuple[ClientTool, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": STEP_STATE_VERSION,
            "step_number": self.step_number,
            "max_steps": self.max_steps,
            "solver": self.solver.to_json(),
            "allowed_tools": list(self.allowed_tools),
            "retries": self.retries,
            "summary": self.summary.to_json() if self.summary else None,
            **({"client_tools": [t.to_json() for t in self.client_tools]} if self.client_tools else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepState:
        """Read a saved state, of this version or an older one (upgraded on the way).

        Raises:
            ValueError: A state of a newer version (written by a newer nightshift), or of a
                version with no upgrade.
        """
        data = upgrade_state(data, STEP_STATE_UPGRADES, current=STEP_STATE_VERSION)
        return cls(
            step_number=int(data["step_number"]),
            max_steps=int(data["max_steps"]),
            solver=SolverState.from_json(data["solver"]),
            allowed_tools=tuple(data.get("allowed_tools", ())),
            retries=int(data.get("retries", 0)),
            summary=SummaryPlan.from_json(data["summary"]) if data["summary"] else None,
            client_tools=tuple(ClientTool.from_json(t) for t in data.get("client_tools", ())),
        )


# How a step state of each old version becomes the next one: ``{1: upgrade_1_to_2}``, written
# when STEP_STATE_VERSION moves on, so that runs in flight across an upgrade of the server go on.
STEP_STATE_UPGRADES: dict[int, Upgrade] = {
    1: lambda data: {**data, "summary": None},  # 2 adds summaries: a step of version 1 never waits for one
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRun:
    """What one ``POST /v1/messages/batches`` created."""

    id: str
    organization_id: str
    status: BatchRunStatus
    metadata: dict[str, Any] = field(default_factory=dict)
    max_steps: int
    callback_url: str | None = None
    callback_sent_at: datetime | None = None
    callback_status_code: int | None = None
    callback_error: str | None = None
    callback_attempts: int = 0
    completed_at: datetime | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    kind: BatchRunKind = BatchRunKind.MAIN
    deadline_at: datetime | None = None  # when it is to be done by (``domain/deadlines.py``)
    queued_agents: int = 0  # the agents of its requests while it waits for its first step
    error: str | None = None  # why it failed before its first step (after it, its items say)
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderBatch:
    """One batch at one provider, for one step of some agents of a run.

    ``endpoint`` is the provider's base URL it goes to: only a worker that reaches the same one
    takes it. ``submit_started_at`` is set before each call that submits it, so after a crash a
    worker knows the provider may have it and looks for it before submitting again;
    ``duplicates`` are the provider ids of copies found that way, and cancelled. ``failures``
    counts consecutive failures of its current stage; past a limit the batch is given up.
    ``next_poll_at`` is when a worker next takes it up (after a failure: when it is tried again);
    None once it is never due again.
    """

    id: str
    organization_id: str
    batch_run_id: str
    provider: str
    step_number: int
    status: ProviderBatchStatus
    endpoint: str | None = None
    provider_batch_id: str | None = None
    provider_status: str | None = None
    request_counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    submit_started_at: datetime | None = None
    submit_attempts: int = 0
    failures: int = 0
    duplicates: tuple[str, ...] = ()
    created_at: datetime
    updated_at: datetime
    polled_at: datetime | None = None
    ended_at: datetime | None = None
    next_poll_at: datetime | None = None
    # Its run's deadline, when only a tail of its requests was left, when its open requests were
    # taken over and how many (see ``domain/deadlines.py``).
    deadline_at: datetime | None = None
    tail_at: datetime | None = None
    takeover_at: datetime | None = None
    taken_over: int = 0
    # The one model of its requests (None: several), by which turnarounds are kept.
    model: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class BatchItem:
    """One agent inside one provider batch. ``result`` is what became of its request, once known."""

    id: str
    organization_id: str
    batch_run_id: str
    provider_batch_id: str
    agent_id: str
    request_status: RequestStatus
    step_status: StepStatus
    step_state: StepState
    result: StoredResult | None = None
    usage: Usage | None = None
    # What its answer cost (see ``Costs``), set when the step is applied; None: no answer, or an
    # unknown model.
    cost_usd: float | None = None
    cost_without_batch_usd: float | None = None
    cache_savings_usd: float | None = None
    takeover_usd: float | None = None
    error: str | None = None
    outcome: ItemOutcome | None = None  # set when the step is applied
    created_at: datetime
    updated_at: datetime

    @property
    def cost(self) -> Costs:
        """Its ``Costs`` (zero when it has none)."""
        return Costs(
            usd=self.cost_usd or 0.0,
            without_batch_usd=self.cost_without_batch_usd or 0.0,
            cache_savings_usd=self.cache_savings_usd or 0.0,
            takeover_usd=self.takeover_usd or 0.0,
        )


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ItemResult:
    """What the provider answered for one item (or why there is no answer), to be stored once.

    ``error`` is a person's reading of a failure.
    """

    item_id: str
    request_status: RequestStatus
    result: StoredResult
    usage: Usage | None = None
    error: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ItemCompletion:
    """How an applied step ended for one item: its outcome, the reason for a failure, its cost."""

    item_id: str
    outcome: ItemOutcome
    error: str | None = None
    cost: Costs | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRunFailure:
    """An agent the run failed: at which step, its request's status, and why (``agent_deleted``:
    the agent was deleted since, its name is the one it had)."""

    agent_id: str
    agent_name: str
    step_number: int
    request_status: RequestStatus
    error: str | None
    agent_deleted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRunAgent:
    """One agent of a run, by name, with its items in the run, oldest first (``agent_deleted``:
    the agent was deleted since, its name is the one it had)."""

    agent_id: str
    agent_name: str
    items: list[BatchItem]
    agent_deleted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PollSnapshot:
    """What a poll of a provider batch saw: the provider's word for its state, and its counts."""

    provider_status: str
    request_counts: dict[str, int]
    polled_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRunRequest:
    """One agent of a new run: its id, the user's messages and an optional step limit.

    ``client_tools`` are offered to the model for the run (the client runs them). ``answered``:
    the request answered the approval request the agent awaited, and the answer was applied as
    the run was made; its first step starts with a heartbeat instead of the user's messages.
    """

    agent_id: str
    messages: tuple[UserInput, ...]
    max_steps: int | None = None
    client_tools: tuple[ClientTool, ...] = ()
    answered: bool = False

    def to_json(self) -> dict[str, Any]:
        """The request as JSON (a message of text alone as its text), as ``from_json`` reads it back."""
        return {
            "agent_id": self.agent_id,
            "messages": [_input_json(m) for m in self.messages],
            "max_steps": self.max_steps,
            "client_tools": [t.to_json() for t in self.client_tools] or None,
            "answered": self.answered,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchRunRequest:
        return cls(
            agent_id=data["agent_id"],
            messages=tuple(
                UserInput(text=m)
                if isinstance(m, str)
                else UserInput(
                    text=m["text"],
                    images=tuple(Image(**i) for i in m["images"]),
                    otid=m.get("otid"),
                    name=m.get("name"),
                )
                for m in data["messages"]
            ),
            max_steps=data["max_steps"],
            client_tools=tuple(ClientTool.from_json(t) for t in data.get("client_tools") or ()),
            answered=bool(data.get("answered", False)),
        )


def _input_json(message: UserInput) -> str | dict[str, Any]:
    # Most messages are a text alone: stored as the string (and read back so from runs written
    # before a message could carry more).
    if not message.images and message.otid is None and message.name is None:
        return message.text
    found: dict[str, Any] = {"text": message.text, "images": [asdict(i) for i in message.images]}
    if message.otid is not None:
        found["otid"] = message.otid
    if message.name is not None:
        found["name"] = message.name
    return found


def refuse_repeated_agents(agent_ids: Iterable[str]) -> None:
    """Raise ``InvalidInput`` naming the agents (ten at most) that ``agent_ids`` holds more than once.

    Checked as a run's body arrives (``api.batch_schemas``), before its requests are read, and
    again when the run is queued (``batch.steps.queue_batch_run``).
    """
    repeated = sorted(i for i, n in Counter(agent_ids).items() if n > 1)
    if repeated:
        raise InvalidInput(f"an agent may appear once per run; repeated: {', '.join(repeated[:10])}", field="requests")
