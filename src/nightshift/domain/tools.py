"""Tools: Python functions the model may call, described by a JSON schema."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from nightshift.domain.fast_init import fast_init

# Both providers' rule for a tool's name.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class ToolType(StrEnum):
    """Where a tool runs."""

    CUSTOM = "custom"  # user source code, run in the tool sandbox
    BASE = "letta_core"  # send_message, conversation_search, archival memory: in-process
    MEMORY = "letta_memory_core"  # core_memory_append / replace, rethink_memory: in-process


@fast_init
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
    # Set when the tool's arguments are pydantic models: the client's model schema, from which
    # the sandbox rebuilds the models (``json_schema`` holds it with every reference inlined).
    args_json_schema: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    return_char_limit: int = 50_000
    metadata: dict[str, Any] = field(default_factory=dict)
    # An agent given the tool gets a requires_approval rule for it (``domain/approvals.py``).
    default_requires_approval: bool = False
    created_at: datetime
    updated_at: datetime


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What makes a tool's ``json_schema`` unusable in a provider request, or None.

    A shape check only (the API checks more when a tool is created): enough that one tool stored
    before that check, or changed under it, fails its agents with a reason instead of failing the
    request of every agent of a step.
    """
    name = schema.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        return f"its name {name!r} is not 1-64 letters, digits, '_' or '-'"
    if not isinstance(schema.get("description", ""), str):
        return "its description is not a string"
    parameters = schema.get("parameters")
    if parameters is None:
        return None
    if not isinstance(parameters, Mapping):
        return "its parameters are not a JSON object schema"
    if parameters.get("type", "object") != "object":
        return "its parameters are not of type object"
    if not isinstance(parameters.get("properties", {}), Mapping):
        return "its parameters' properties are not an object"
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return "its parameters' required is not a list of names"
    return None
