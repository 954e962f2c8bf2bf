"""Runs in Letta's shapes: ``Run``, ``Step`` and the usage of a run, for agent runs and batch runs alike.

The routes write the dicts of the functions here (``batch_views.json_response``); the models
describe them for the OpenAPI schema.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from nightshift.domain.agent_runs import AgentRun, AgentRunStep
from nightshift.domain.batches import BatchRun


class RunPublic(BaseModel):
    """Letta's ``Run``: a send to one agent (``run-...``) or a batch run (``batch-...``)."""

    id: str
    agent_id: str | None = Field(description="The agent; for a batch run, one of its agents")
    status: str
    background: bool
    created_at: datetime
    completed_at: datetime | None
    stop_reason: str | None
    metadata: dict[str, Any] = Field(description='A batch run\'s has "kind": "batch"; a failed send\'s "error"')
    request_config: dict[str, Any] | None
    callback_url: str | None
    callback_sent_at: datetime | None
    callback_status_code: int | None
    callback_error: str | None
    total_duration_ns: int | None
    ttft_ns: int | None
    conversation_id: str | None
    base_template_id: str | None


class PromptTokensDetails(BaseModel):
    cached_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int


class StepPublic(BaseModel):
    """Letta's ``Step``: one model call of an agent run."""

    id: str
    run_id: str
    agent_id: str
    status: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    created_at: datetime


class RunUsage(BaseModel):
    """Letta's usage of a run; ``prompt_tokens`` counts the cached tokens too."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails


def run_json(run: AgentRun) -> dict[str, Any]:
    """An agent run as Letta's ``Run``."""
    duration = None
    if run.completed_at is not None:
        duration = int((run.completed_at - run.created_at).total_seconds() * 1e9)
    return {
        "id": run.id,
        "agent_id": run.agent_id,
        "status": run.status.value,
        "background": run.background,
        "created_at": run.created_at,
        "completed_at": run.completed_at,
        "stop_reason": run.stop_reason,
        "metadata": run.metadata | ({"error": run.error} if run.error else {}),
        "request_config": run.request_config,
        "callback_url": run.callback_url,
        "callback_sent_at": run.callback_sent_at,
        "callback_status_code": run.callback_status_code,
        "callback_error": run.callback_error,
        "total_duration_ns": duration,
        "ttft_ns": None,
        "conversation_id": None,
        "base_template_id": None,
    }


def batch_run_json(run: BatchRun, agent_id: str | None) -> dict[str, Any]:
    """A batch run as Letta's ``Run``: in the background, shown with one of its agents."""
    return {
        "id": run.id,
        "agent_id": agent_id,
        "status": run.status.value,
        "background": True,
        "created_at": run.created_at,
        "completed_at": run.completed_at,
        "stop_reason": None,
        "metadata": run.metadata | {"kind": "batch"},
        "request_config": None,
        "callback_url": run.callback_url,
        "callback_sent_at": run.callback_sent_at,
        "callback_status_code": run.callback_status_code,
        "callback_error": run.callback_error,
        "total_duration_ns": None,
        "ttft_ns": None,
        "conversation_id": None,
        "base_template_id": None,
    }


def step_json(run: AgentRun, step: AgentRunStep) -> dict[str, Any]:
    """One model call of an agent run as Letta's ``Step``."""
    return {
        "id": step.id,
        "run_id": run.id,
        "agent_id": run.agent_id,
        "status": "success",
        "model": step.model,
        "prompt_tokens": step.prompt_tokens,
        "completion_tokens": step.completion_tokens,
        "total_tokens": step.prompt_tokens + step.completion_tokens,
        "prompt_tokens_details": {
            "cached_tokens": step.cache_read_tokens,
            "cache_read_tokens": step.cache_read_tokens,
            "cache_creation_tokens": step.cache_write_tokens,
        },
        "created_at": step.created_at,
    }


def usage_json(prompt: int, completion: int, cache_read: int, cache_write: int) -> dict[str, Any]:
    """Letta's usage of a run; ``prompt`` counts the cached tokens too."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {
            "cached_tokens": cache_read,
            "cache_read_tokens": cache_read,
            "cache_creation_tokens": cache_write,
        },
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
