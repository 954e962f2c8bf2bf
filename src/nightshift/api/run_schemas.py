"""Runs in Letta's shapes: ``Run``, ``Step`` and the usage of a run, for agent runs and batch runs alike."""

from __future__ import annotations

from typing import Any

from nightshift.domain.agent_runs import AgentRun, AgentRunStep
from nightshift.domain.batches import BatchRun


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
