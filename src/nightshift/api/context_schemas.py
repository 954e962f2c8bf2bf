"""Letta's context-window overview (``GET /v1/agents/{id}/context``) in its field names."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from nightshift.api.letta_messages import to_letta_messages
from nightshift.runtime.window import ContextOverview


class ContextWindowOverview(BaseModel):
    """Letta's ContextWindowOverview: the parts of the agent's next request and their tokens."""

    context_window_size_max: int
    context_window_size_current: int
    num_messages: int
    num_archival_memory: int
    num_recall_memory: int
    num_tokens_external_memory_summary: int
    external_memory_summary: str
    num_tokens_system: int
    system_prompt: str
    num_tokens_core_memory: int
    core_memory: str
    num_tokens_summary_memory: int
    summary_memory: str | None
    num_tokens_functions_definitions: int
    functions_definitions: list[dict[str, Any]]
    num_tokens_messages: int
    messages: list[dict[str, Any]]

    @classmethod
    def of(cls, overview: ContextOverview) -> ContextWindowOverview:
        return cls(
            context_window_size_max=overview.limit,
            context_window_size_current=overview.current,
            num_messages=len(overview.messages) + 1,  # and the system message, as Letta counts
            num_archival_memory=overview.archival_count,
            num_recall_memory=overview.recall_count,
            num_tokens_external_memory_summary=overview.memory_metadata_tokens,
            external_memory_summary=overview.memory_metadata,
            num_tokens_system=overview.system_tokens,
            system_prompt=overview.system_prompt,
            num_tokens_core_memory=overview.core_memory_tokens,
            core_memory=overview.core_memory,
            num_tokens_summary_memory=overview.summary_tokens,
            summary_memory=overview.summary,
            num_tokens_functions_definitions=overview.tools_tokens,
            functions_definitions=[{"type": "function", "function": dict(t)} for t in overview.tools],
            num_tokens_messages=overview.messages_tokens,
            messages=[part for m in overview.messages for part in to_letta_messages(m)],
        )
