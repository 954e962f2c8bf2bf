"""What the batch-run routes answer: the run with its progress, a page of its agents, a page of its
messages.

The routes build plain dicts and write them with orjson (``json_response``), as ``agent_json``
does for agents: validating a page of a thousand agents into models only to serialize them again
costs more than the page itself. The models here describe those dicts for the OpenAPI schema (the
routes' ``response_model``), which the Python client's models are checked against; a test checks
that a live answer has no key its model does not name.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, Literal

import orjson
from fastapi import Response
from pydantic import BaseModel, Field, TypeAdapter

from nightshift.domain.answers import Route
from nightshift.domain.batch_progress import KindCosts
from nightshift.domain.batches import ItemOutcome, ProviderBatch, ProviderBatchStatus
from nightshift.domain.costs import Costs
from nightshift.domain.messages import Message
from nightshift.domain.polling import Turnaround, Turnarounds
from nightshift.domain.usage import Usage
from nightshift.services.batch_runs import AgentInBatchRun, BatchRunView

# Datetimes in UTC end with "Z", as pydantic writes them.
_OPTIONS = orjson.OPT_UTC_Z
_ANY = TypeAdapter(Any)


def json_response(content: Any) -> Response:
    """``content`` (dicts, lists, datetimes) as a JSON response, without a model's validation."""
    try:
        body = orjson.dumps(content, option=_OPTIONS)
    except TypeError:  # a value orjson refuses (an integer past 64 bits in metadata): pydantic's way
        body = _ANY.dump_json(content)
    return Response(body, media_type="application/json")


class TokenUsage(BaseModel):
    """Tokens used, by kind; empty (every kind left out) when nothing answered yet."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0


class AgentCounts(BaseModel):
    """The run's agents by where they are."""

    running: int
    finished: int
    failed: int
    cancelled: int
    awaiting_approval: int = Field(
        default=0, description="Stopped on a call that waits for the client; left out when there are none"
    )


class RunFailure(BaseModel):
    """An agent that failed in the run, with the step it failed at and why."""

    agent_id: str
    agent_name: str | None
    agent_deleted: bool
    step_number: int
    request_status: str
    error: str | None


class ProviderBatchPublic(BaseModel):
    """One batch of one step at one provider."""

    id: str
    provider: str
    provider_batch_id: str | None
    step_number: int
    status: str
    provider_status: str | None
    request_counts: dict[str, int]
    usage: TokenUsage
    cost_usd: float
    takeover_at: datetime | None = Field(
        description="When its unanswered requests were taken over for the run's deadline (null: never)"
    )
    taken_over: int = Field(description="Its requests answered through the normal API instead")
    takeover_usd: float = Field(description="What those cost above the batch price (part of cost_usd)")
    error: str | None
    duplicates: list[str] = Field(description="Provider ids of copies found and cancelled")
    created_at: datetime
    ended_at: datetime | None
    updated_at: datetime = Field(description="Its last change of status")


class ProviderProblem(BaseModel):
    """The run's newest problem with a provider (it cannot be reached, it refused the batch)."""

    provider: str
    provider_batch_id: str = Field(description="nightshift's id of the provider batch (llm_batch-...)")
    step_number: int
    stage: str | None = Field(description="submit, poll, apply or cancel: what is retried; null once closed")
    error: str
    attempts: int = Field(description="Failures in a row of that stage (past a limit its agents fail)")
    retrying: bool
    retry_at: datetime | None = Field(description="When it is tried again, while it is retried")


class BatchRunProgress(BaseModel):
    """Where a run is: its step, its agents, tokens and costs, failures and provider batches."""

    step: int
    agents: AgentCounts
    summaries: int = Field(description="Steps that summarized an agent's oldest messages before its next request")
    failures: list[RunFailure]
    usage: TokenUsage
    cost_usd: float
    cost_without_batch_usd: float = Field(description="What the same tokens cost through the normal API")
    batch_savings_usd: float
    cache_savings_usd: float = Field(description="What the prompt cache saved (negative when it cost more)")
    takeover_usd: float = Field(
        description="What the requests taken over for the deadline cost above the batch price (part of cost_usd)"
    )
    last_error: ProviderProblem | None = Field(
        description="Known from the first failed attempt, long before any agent fails of it"
    )
    provider_batches: list[ProviderBatchPublic]


class BatchRunPublic(BaseModel):
    """Letta's BatchJob, with nightshift's progress."""

    id: str
    status: str
    job_type: str = "batch"
    kind: Literal["main", "sleeptime"] = Field(
        description="main: made by POST /v1/messages/batches; sleeptime: sleep-time agents gathered by the poller"
    )
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    metadata: dict[str, Any]
    callback_url: str | None
    callback_sent_at: datetime | None
    callback_status_code: int | None
    callback_error: str | None
    agent_id: None = None
    deadline: datetime | None = Field(default=None, description="nightshift: when the run is to be done by")
    error: str | None = Field(
        default=None,
        description="nightshift: why the run failed before its first step (after it, see progress.failures)",
    )
    progress: BatchRunProgress


class BatchRunAgentRequest(BaseModel):
    """One request of an agent in a run: its step, whether it summarized the window, its tokens
    and costs (what its caching saved, negative where a cache write cost more than it saved)."""

    step_number: int
    summary: bool = Field(description="It summarized the agent's window rather than stepping it")
    status: str = Field(description="created, running, completed, failed, cancelled or expired")
    usage: TokenUsage | None
    cost_usd: float
    cost_without_batch_usd: float
    batch_savings_usd: float
    cache_savings_usd: float
    taken_over: bool = Field(description="Sent through the normal API for the run's deadline, its batch cancelled")


class BatchRunAgent(BaseModel):
    """One agent of a run: its state, steps answered, tokens, costs and last error, and each request's."""

    agent_id: str
    agent_name: str
    agent_deleted: bool
    state: str = Field(description="running, finished, failed, cancelled or needs_approval")
    steps: int
    step_number: int = Field(description="The step (from 0) the agent is in, or stopped or failed at")
    usage: TokenUsage
    cost_usd: float
    cost_without_batch_usd: float
    batch_savings_usd: float
    cache_savings_usd: float
    error: str | None
    requests: list[BatchRunAgentRequest]


class BatchRunAgents(BaseModel):
    """A page of a run's agents."""

    agents: list[BatchRunAgent]


class MessagePart(BaseModel):
    """A part of a message's content: ``text`` (with ``text``) or ``reasoning`` (with ``reasoning``)."""

    type: str
    text: str | None = None
    reasoning: str | None = None
    is_native: bool | None = None


class ToolCallFunction(BaseModel):
    name: str
    arguments: str = Field(description="The arguments, as a JSON text")


class ToolCall(BaseModel):
    id: str
    type: str = "function"
    function: ToolCallFunction


class RunMessage(BaseModel):
    """A message of a batch run, OpenAI-like."""

    id: str
    agent_id: str
    role: str
    content: list[MessagePart]
    name: str | None
    tool_calls: list[ToolCall]
    tool_call_id: str | None
    created_at: datetime
    batch_item_id: str | None


class BatchRunMessages(BaseModel):
    """A page of a run's messages."""

    messages: list[RunMessage]


def _awaiting(count: int) -> dict[str, int]:
    return {"awaiting_approval": count} if count else {}


def batch_run_json(view: BatchRunView) -> dict[str, Any]:
    """The run as ``BatchRunPublic``'s JSON."""
    run, progress = view.run, view.progress
    return {
        "id": run.id,
        "status": run.status.value,
        "job_type": "batch",
        "kind": run.kind.value,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "completed_at": run.completed_at,
        "metadata": run.metadata,
        "callback_url": run.callback_url,
        "callback_sent_at": run.callback_sent_at,
        "callback_status_code": run.callback_status_code,
        "callback_error": run.callback_error,
        "agent_id": None,
        "deadline": run.deadline_at,
        "error": run.error,
        "progress": {
            "step": progress.step,
            "agents": {
                "running": progress.running,
                "finished": progress.count(ItemOutcome.FINISHED),
                "failed": progress.count(ItemOutcome.FAILED),
                "cancelled": progress.count(ItemOutcome.CANCELLED),
                # Shown when there are any, so that a run without approvals looks as it did.
                **_awaiting(progress.count(ItemOutcome.NEEDS_APPROVAL)),
            },
            "summaries": progress.count(ItemOutcome.SUMMARIZED),
            "failures": [
                {
                    "agent_id": f.agent_id,
                    "agent_name": f.agent_name,
                    "agent_deleted": f.agent_deleted,
                    "step_number": f.step_number,
                    "request_status": f.request_status.value,
                    "error": f.error,
                }
                for f in view.failures
            ],
            "usage": usage_json(progress.usage),
            **costs_json(progress.cost),
            "takeover_usd": round(progress.cost.takeover_usd, 6),
            "last_error": last_error_json(view.batches),
            "provider_batches": [
                {
                    "id": b.id,
                    "provider": b.provider,
                    "provider_batch_id": b.provider_batch_id,
                    "step_number": b.step_number,
                    "status": b.status.value,
                    "provider_status": b.provider_status,
                    "request_counts": b.request_counts,
                    "usage": usage_json(progress.batch_usage.get(b.id)),
                    "cost_usd": round(progress.batch_cost.get(b.id, Costs()).usd, 6),
                    "takeover_at": b.takeover_at,
                    "taken_over": b.taken_over,
                    "takeover_usd": round(progress.batch_cost.get(b.id, Costs()).takeover_usd, 6),
                    "error": b.error,
                    "duplicates": list(b.duplicates),
                    "created_at": b.created_at,
                    "ended_at": b.ended_at,
                    "updated_at": b.updated_at,
                }
                for b in view.batches
            ],
        },
    }


# What a provider batch's worker was doing when it failed, by the status it stayed in.
_STAGES: Final = {
    ProviderBatchStatus.CREATED: "submit",
    ProviderBatchStatus.RUNNING: "poll",
    ProviderBatchStatus.ENDED: "apply",
    ProviderBatchStatus.CANCELLING: "cancel",
}


def last_error_json(batches: Sequence[ProviderBatch]) -> dict[str, Any] | None:
    """The run's newest provider problem: of its provider batches with an error, an open one
    (whose stage is retried) before a closed one, then the latest step's. None when there is none.

    ``retrying`` says whether it will be tried again, at ``retry_at``; ``attempts`` counts the
    failures in a row of that stage (the batch is given up past a limit, its agents failed).
    """
    failed = [b for b in batches if b.error]
    if not failed:
        return None
    batch = max(failed, key=lambda b: (b.status in _STAGES, b.step_number, b.updated_at))
    retrying = batch.status in _STAGES and batch.next_poll_at is not None
    return {
        "provider": batch.provider,
        "provider_batch_id": batch.id,
        "step_number": batch.step_number,
        "stage": _STAGES.get(batch.status),
        "error": batch.error,
        "attempts": batch.failures,
        "retrying": retrying,
        "retry_at": batch.next_poll_at if retrying else None,
    }


def agent_in_run_json(agent: AgentInBatchRun) -> dict[str, Any]:
    """One agent of a run as ``BatchRunAgent``'s JSON."""
    return {
        "agent_id": agent.agent_id,
        "agent_name": agent.agent_name,
        "agent_deleted": agent.agent_deleted,
        "state": agent.state,
        "steps": agent.steps,
        "step_number": agent.step_number,
        "usage": usage_json(agent.usage),
        **costs_json(agent.cost),
        "error": agent.error,
        "requests": [
            {
                "step_number": item.step_state.step_number,
                "summary": item.step_state.summary is not None,
                "status": item.request_status.value,
                "usage": None if item.usage is None else usage_json(item.usage),
                **costs_json(item.cost),
                "taken_over": item.result is not None and item.result.route is not Route.BATCH,
            }
            for item in agent.items
        ],
    }


def run_message_json(message: Message) -> dict[str, Any]:
    """A message of a batch run as ``RunMessage``'s JSON."""
    content: list[dict[str, Any]] = []
    if message.reasoning:
        content.append({"type": "reasoning", "reasoning": message.reasoning, "is_native": False})
    if message.text:
        content.append({"type": "text", "text": message.text})
    return {
        "id": message.id,
        "agent_id": message.agent_id,
        "role": message.role.value,
        "content": content,
        "name": message.name,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
        "created_at": message.created_at,
        "batch_item_id": message.batch_item_id,
    }


def usage_json(usage: Usage | None) -> dict[str, int]:
    """Tokens used, by kind (empty when nothing answered yet)."""
    return usage.to_json() if usage is not None else {}


def costs_json(cost: Costs) -> dict[str, float]:
    """A run's or an agent's costs in USD, each rounded to a millionth of a dollar.

    ``cost_without_batch_usd`` is what the same tokens cost through the normal API (so the batch
    saved the difference); ``cache_savings_usd`` what the prompt cache saved: the cached tokens
    at the plain input price minus what reading and writing them cost, negative when the writes
    were not read back enough to pay for themselves.
    """
    return {
        "cost_usd": round(cost.usd, 6),
        "cost_without_batch_usd": round(cost.without_batch_usd, 6),
        "batch_savings_usd": round(cost.without_batch_usd - cost.usd, 6),
        "cache_savings_usd": round(cost.cache_savings_usd, 6),
    }


class KindCostsPublic(BaseModel):
    """What one kind of batch run cost the organization: the users' runs (main) or the sleep-time agents'."""

    kind: Literal["main", "sleeptime"]
    runs: int
    agents: int = Field(description="Agents the runs stepped (an agent in several runs counts once)")
    requests: int = Field(description="Requests the providers answered")
    usage: TokenUsage
    cost_usd: float
    cost_without_batch_usd: float = Field(description="What the same tokens cost through the normal API")
    batch_savings_usd: float
    cache_savings_usd: float


class BatchRunCosts(BaseModel):
    kinds: list[KindCostsPublic]


class ProviderTurnaroundPublic(BaseModel):
    provider: str
    ended: int = Field(description="How many of the latest provider batches (1,000 at most) ended")
    p10_seconds: float | None = Field(description="Submit to end: the 10th percentile (null under 5 ends)")
    p50_seconds: float | None = Field(description="The median")
    p90_seconds: float | None = Field(description="The 90th percentile")


class ModelTurnaroundPublic(ProviderTurnaroundPublic):
    model: str = Field(description="The model of every request of those batches")


class BatchTurnarounds(BaseModel):
    providers: list[ProviderTurnaroundPublic]
    models: list[ModelTurnaroundPublic] = Field(
        description="The same by model, of the batches whose requests were all of one model"
    )


def turnarounds_json(seen: Turnarounds) -> dict[str, Any]:
    """``BatchTurnarounds``' JSON."""
    return {
        "providers": [_turnaround_json(ended, spread, provider=p) for p, (ended, spread) in seen.providers.items()],
        "models": [
            _turnaround_json(ended, spread, provider=p, model=m) for (p, m), (ended, spread) in seen.models.items()
        ],
    }


def _turnaround_json(ended: int, spread: Turnaround | None, **names: str) -> dict[str, Any]:
    return {
        **names,
        "ended": ended,
        **{
            f"{name}_seconds": None if spread is None else getattr(spread, name).total_seconds()
            for name in ("p10", "p50", "p90")
        },
    }


def kind_costs_json(costs: Sequence[KindCosts]) -> dict[str, Any]:
    """``BatchRunCosts``' JSON."""
    return {
        "kinds": [
            {
                "kind": c.kind.value,
                "runs": c.runs,
                "agents": c.agents,
                "requests": c.requests,
                "usage": usage_json(c.usage),
                **costs_json(c.cost),
            }
            for c in costs
        ]
    }
