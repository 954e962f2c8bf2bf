"""Tool rules: constraints on which tool an agent may call next, in Letta's wire shape.

Rules are stored on the agent as JSON and parsed into these models. The solver that applies
them lives in ``domain/solver.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from nightshift.errors import InvalidInput


class _Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    tool_name: str = Field(min_length=1)
    prompt_template: str | None = None

    def named_tools(self) -> list[str]:
        """Every tool name this rule refers to."""
        return [self.tool_name]


class InitToolRule(_Rule):
    """``run_first``: the first call of a run must be one of the run_first tools."""

    type: Literal["run_first"] = "run_first"


class TerminalToolRule(_Rule):
    """``exit_loop``: calling this tool ends the agent's loop."""

    type: Literal["exit_loop"] = "exit_loop"


class ContinueToolRule(_Rule):
    """``continue_loop``: calling this tool always continues the loop."""

    type: Literal["continue_loop"] = "continue_loop"


class ChildToolRule(_Rule):
    """``constrain_child_tools``: after this tool, only ``children`` may be called."""

    type: Literal["constrain_child_tools"] = "constrain_child_tools"
    children: list[str]

    def named_tools(self) -> list[str]:
        return [self.tool_name, *self.children]


class ConditionalToolRule(_Rule):
    """``conditional``: the next tool depends on this tool's output.

    ``child_output_mapping`` maps an output (compared as text, after JSON decoding of simple
    values) to the one tool allowed next; ``default_child`` applies when nothing matches.
    """

    type: Literal["conditional"] = "conditional"
    child_output_mapping: dict[str, str]
    default_child: str | None = None
    require_output_mapping: bool = False

    def named_tools(self) -> list[str]:
        children = list(self.child_output_mapping.values())
        return [self.tool_name, *children, *([self.default_child] if self.default_child else [])]


class MaxCountPerStepToolRule(_Rule):
    """``max_count_per_step``: the tool may be called at most ``max_count_limit`` times in a run."""

    type: Literal["max_count_per_step"] = "max_count_per_step"
    max_count_limit: int = Field(ge=1)


class ParentToolRule(_Rule):
    """``parent_last_tool``: ``children`` may only be called right after this tool."""

    type: Literal["parent_last_tool"] = "parent_last_tool"
    children: list[str]

    def named_tools(self) -> list[str]:
        return [self.tool_name, *self.children]


class RequiredBeforeExitToolRule(_Rule):
    """``required_before_exit``: the loop may not end before this tool has been called."""

    type: Literal["required_before_exit"] = "required_before_exit"


ToolRule = Annotated[
    InitToolRule
    | TerminalToolRule
    | ContinueToolRule
    | ChildToolRule
    | ConditionalToolRule
    | MaxCountPerStepToolRule
    | ParentToolRule
    | RequiredBeforeExitToolRule,
    Field(discriminator="type"),
]

_rules_adapter: TypeAdapter[list[ToolRule]] = TypeAdapter(list[ToolRule])


def parse_tool_rules(raw: Iterable[dict[str, Any]]) -> tuple[ToolRule, ...]:
    """Parse stored or submitted rules; raise ``InvalidInput`` naming the bad rule."""
    try:
        return tuple(_rules_adapter.validate_python(list(raw)))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"invalid tool rule at {where}: {first['msg']}", field="tool_rules") from exc


def dump_tool_rules(rules: Sequence[ToolRule]) -> list[dict[str, Any]]:
    """Rules as JSON-ready dicts (the stored and the wire form)."""
    return [rule.model_dump(exclude_none=True) for rule in rules]


def check_rules_name_known_tools(rules: Sequence[ToolRule], tool_names: Iterable[str]) -> None:
    """Raise ``InvalidInput`` when a rule names a tool the agent does not have."""
    known = set(tool_names)
    for index, rule in enumerate(rules):
        missing = [name for name in rule.named_tools() if name not in known]
        if missing:
            raise InvalidInput(
                f"tool rule {index} ({rule.type}) names tools the agent does not have: "
                f"{', '.join(sorted(set(missing)))}",
                field="tool_rules",
            )
