"""Agent runs: one per message send to one agent (Letta's "run"), foreground or in the background.

A batch run (``domain.batches``) steps many agents through provider batches; an agent run steps
one agent through the provider's normal API, for ``POST /v1/agents/{id}/messages`` and its
``/async`` twin. Its steps are kept on the run, each with its id, model and tokens.

States::

    created --start--> running --finish--> completed | failed
        \\                 \\
         `--cancel-------`--cancel--> cancelled

A run still created or running when its server process stops is failed: at the process's
shutdown, at the next start of a server (``fail_interrupted``), or, for a background run whose
process stopped renewing its ``lease_until``, by the first reader of its stream or starting
server that sees the lease expired (``fail_expired``). Nothing resumes it; the messages it wrote
stay written, and a reader of its stream gets the failure as the stream's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class AgentRunStatus(StrEnum):
    """Where an agent run is."""

    CREATED = "created"  # accepted, not started yet -> running, or cancelled
    RUNNING = "running"  # stepping the agent -> completed, failed or cancelled
    COMPLETED = "completed"  # the agent stopped by itself or reached its step limit (final)
    FAILED = "failed"  # a provider or input error, or the server stopped under it (final)
    CANCELLED = "cancelled"  # the user cancelled it; it stops before its next step (final)

    @property
    def ended(self) -> bool:
        """Whether nothing more happens to the run."""
        return self in (AgentRunStatus.COMPLETED, AgentRunStatus.FAILED, AgentRunStatus.CANCELLED)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRunStep:
    """One model call of an agent run and the tokens it used."""

    id: str
    model: str
    created_at: datetime
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        """The step as it is stored on its run."""
        return {
            "id": self.id,
            "model": self.model,
            "created_at": self.created_at.isoformat(),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentRunStep:
        """Read a step back from its run."""
        return cls(
            id=data["id"],
            model=data["model"],
            created_at=datetime.fromisoformat(data["created_at"]),
            prompt_tokens=data["prompt_tokens"],
            completion_tokens=data["completion_tokens"],
            cache_read_tokens=data["cache_read_tokens"],
            cache_write_tokens=data["cache_write_tokens"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRun:
    """One send to one agent: its state, options, steps and callback."""

    id: str
    organization_id: str
    agent_id: str
    status: AgentRunStatus
    background: bool
    created_at: datetime
    updated_at: datetime
    # Letta's request_config: use_assistant_message, assistant_message_tool_name/_kwarg,
    # include_return_message_types, as the send asked for them.
    request_config: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None  # Letta's stop reason, once ended
    error: str | None = None
    steps: tuple[AgentRunStep, ...] = ()
    callback_url: str | None = None
    callback_sent_at: datetime | None = None
    callback_status_code: int | None = None
    callback_error: str | None = None
    completed_at: datetime | None = None
    # A background run's: its process renews it while it steps the run (an open run past it is dead).
    lease_until: datetime | None = None
