"""Tools: Python functions the model may call, described by a JSON schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class ToolType(StrEnum):
    """Where a tool runs."""

    CUSTOM = "custom"  # user source code, run in the tool sandbox
    BASE = "letta_core"  # send_message, conversation_search, archival memory: in-process
    MEMORY = "letta_memory_core"  # core_memory_append / replace, rethink_memory: in-process


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """A tool of an organization. ``json_schema`` is {name, description, parameters}."""

    id: str
    organization_id: str
    name: str
    description: str
    json_schema: dict[str, Any]
    tool_type: ToolType
    source_code: str | None = None
    tags: tuple[str, ...] = ()
    return_char_limit: int = 50_000
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
