"""Bodies of the tool routes, in Letta's field names, and a tool's view."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from nightshift.api.input import Body, Name, Tags, Text, copied_fields
from nightshift.domain.limits import MAX_LIST_ITEMS, MAX_RETURN_CHARS, MAX_SOURCE_CHARS, MAX_TAGS
from nightshift.domain.tools import Tool
from nightshift.domain.unset import given
from nightshift.services.tools import ToolChanges

ReturnCharLimit = Annotated[int, Field(ge=1, le=MAX_RETURN_CHARS)]
SourceCode = Annotated[str, Field(min_length=1, max_length=MAX_SOURCE_CHARS)]


class ToolCreate(Body):
    """A custom tool: Python source whose function signature and docstring give the schema."""

    source_code: SourceCode
    description: Text | None = None
    tags: Tags = Field(default_factory=list)
    return_char_limit: ReturnCharLimit = 50_000
    source_type: Literal["python"] = "python"
    json_schema: dict[str, Any] | None = Field(
        default=None,
        description="Replaces the schema made from the source: {name, description, parameters (an object schema)}",
    )
    args_json_schema: dict[str, Any] | None = Field(
        default=None,
        description="The JSON schema of a pydantic model of the arguments (model_json_schema()); the function "
        "then gets model instances",
    )
    default_requires_approval: bool | None = Field(
        default=None,
        description="Whether an agent given the tool must have each call approved (a requires_approval rule)",
    )


class ToolUpdate(Body):
    """Fields of a tool to change; absent or null fields stay as they are."""

    source_code: SourceCode | None = None
    description: Text | None = None
    tags: Tags | None = None
    return_char_limit: ReturnCharLimit | None = None
    default_requires_approval: bool | None = None

    def to_changes(self) -> ToolChanges:
        return ToolChanges(
            source_code=given(self.source_code),
            description=given(self.description),
            tags=given(self.tags),
            return_char_limit=given(self.return_char_limit),
            default_requires_approval=given(self.default_requires_approval),
        )


class ToolPublic(BaseModel):
    id: str
    name: str
    description: str
    tool_type: str
    source_type: str | None
    source_code: str | None
    json_schema: dict[str, Any]
    args_json_schema: dict[str, Any] | None
    tags: list[str]
    return_char_limit: int
    default_requires_approval: bool
    metadata_: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, tool: Tool) -> ToolPublic:
        return cls(**{**tool_copied(tool), **tool_own(tool), "tool_type": tool.tool_type.value})


_TOOL_COPIED = copied_fields(ToolPublic, Tool)


def tool_copied(tool: Tool) -> dict[str, Any]:
    """ToolPublic's fields that are the tool's own, as they are."""
    return {name: getattr(tool, name) for name in _TOOL_COPIED}


def tool_own(tool: Tool) -> dict[str, Any]:
    """ToolPublic's fields that are not the tool's under the same name."""
    return {"source_type": "python" if tool.source_code else None, "metadata_": tool.metadata}


class ToolSearch(Body):
    """Letta's tool search: words to look for, and filters. Every search mode is a word search here."""

    query: Text | None = None
    search_mode: Literal["vector", "fts", "hybrid"] = "hybrid"
    tags: Tags | None = None
    tool_types: Annotated[list[Name], Field(max_length=MAX_TAGS)] | None = None
    limit: int = Field(default=50, ge=1, le=MAX_LIST_ITEMS)


class ToolRunBody(Body):
    """The arguments of a direct tool run."""

    args: dict[str, Any] = Field(default_factory=dict)
