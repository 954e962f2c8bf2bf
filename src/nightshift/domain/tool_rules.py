"""Tool rules: constraints on which tool an agent may call next, in Letta's wire shape.

Rules are stored on the agent as JSON and parsed into these models. The solver that applies
them lives in ``domain/solver.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from nightshift.domain.limits import MAX_STEPS
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


class RequiresApprovalToolRule(_Rule):
    """``requires_approval``: a call of this tool waits for a person to approve or deny it before it runs
    (the agent stops with an approval request; ``domain/approvals.py``)."""

    type: Literal["requires_approval"] = "requires_approval"


ToolRule = Annotated[
    InitToolRule
    | TerminalToolRule
    | ContinueToolRule
    | ChildToolRule
    | ConditionalToolRule
    | MaxCountPerStepToolRule
    | ParentToolRule
    | RequiredBeforeExitToolRule
    | RequiresApprovalToolRule,
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


def dedupe_tool_rules(rules: Sequence[ToolRule]) -> list[ToolRule]:
    """The rules in order without repeats: a rule identical to an earlier one is dropped, as Letta does."""
    seen: set[str] = set()
    kept: list[ToolRule] = []
    for rule in rules:
        key = json.dumps(rule.model_dump(mode="json"), sort_keys=True)
        if key not in seen:
            seen.add(key)
            kept.append(rule)
    return kept


def check_tool_rules(rules: Sequence[ToolRule], tool_names: Iterable[str]) -> None:
    """Raise ``InvalidInput`` (field ``tool_rules``) when the rules cannot hold for an agent with these tools.

    A rule may name tools the agent does not have (as Letta allows: the tool may be attached
    later); the solver never offers a tool the agent lacks, so such a rule only narrows what is
    left or, when nothing is left, lets every tool through. Refused, each with the reason:

    - a ``max_count_per_step`` limit over ``MAX_STEPS`` (a run never takes more steps);
    - ``constrain_child_tools`` or ``parent_last_tool`` with no children, ``conditional`` with
      neither ``child_output_mapping`` nor ``default_child``;
    - one tool that is both ``exit_loop`` and ``continue_loop``;
    - ``run_first`` on more than one tool (repeats of one rule are fine: see ``dedupe_tool_rules``);
    - a ``required_before_exit`` tool that no run can reach (see :func:`reachable_tools`).
    """
    tools = list(dict.fromkeys(tool_names))
    for index, rule in enumerate(rules):
        if isinstance(rule, ChildToolRule | ParentToolRule) and not rule.children:
            raise InvalidInput(
                f"tool rule {index} ({rule.type} on {rule.tool_name}) has no children: name at least one tool",
                field="tool_rules",
            )
        if isinstance(rule, ConditionalToolRule) and not rule.child_output_mapping and not rule.default_child:
            raise InvalidInput(
                f"tool rule {index} (conditional on {rule.tool_name}) names no child: give child_output_mapping "
                "or default_child",
                field="tool_rules",
            )
        if isinstance(rule, MaxCountPerStepToolRule) and rule.max_count_limit > MAX_STEPS:
            raise InvalidInput(
                f"tool rule {index} (max_count_per_step on {rule.tool_name}): max_count_limit must be at most "
                f"{MAX_STEPS}, the most steps a run takes",
                field="tool_rules",
            )
    ending = {r.tool_name for r in rules if isinstance(r, TerminalToolRule)}
    both = sorted(ending & {r.tool_name for r in rules if isinstance(r, ContinueToolRule)})
    if both:
        raise InvalidInput(
            f"{', '.join(both)}: a tool cannot be both exit_loop (calling it ends the loop) and continue_loop "
            "(calling it continues the loop); keep one of the two rules",
            field="tool_rules",
        )
    first = list(dict.fromkeys(r.tool_name for r in rules if isinstance(r, InitToolRule)))
    if len(first) > 1:
        raise InvalidInput(
            f"run_first names {len(first)} tools ({', '.join(first)}): only one tool can run first",
            field="tool_rules",
        )
    # A required tool the agent lacks does not hold the loop open (see ToolRulesSolver.decide).
    required = list(
        dict.fromkeys(r.tool_name for r in rules if isinstance(r, RequiredBeforeExitToolRule) and r.tool_name in tools)
    )
    reachable = reachable_tools(rules, tools)
    unreachable = [name for name in required if name not in reachable]
    if unreachable:
        raise InvalidInput(
            f"required_before_exit names {', '.join(unreachable)}, which the other rules never let the agent "
            f"call (the tools it can reach: {', '.join(sorted(reachable)) or 'none'}); the loop could never end "
            "before max_steps",
            field="tool_rules",
        )


def reachable_tools(rules: Sequence[ToolRule], tool_names: Iterable[str]) -> set[str]:
    """Every tool of ``tool_names`` that some run of an agent with these rules might call.

    "Might" is meant generously (an over-approximation), so that a tool left out can certainly
    never be called. It follows ``ToolRulesSolver.allowed_tools``, whose answer depends on the last
    tool called, with these generalisations: a conditional rule may map the output to any one of
    its children (or to no constraint at all, without a default and without
    ``require_output_mapping``), and two conditional rules on one tool may allow anything;
    ``max_count_per_step`` only takes tools away, except that a choice made only of limited tools
    may run empty; and an empty choice makes the solver allow every tool. A run is assumed to go on
    as long as needed (a ``required_before_exit`` tool holds the loop open until its step limit).
    A call the rules refused is not a call (the runtime does not register it), so only allowed
    calls move a run on.
    """
    tools = list(dict.fromkeys(tool_names))
    everything = set(tools)
    first = {r.tool_name for r in rules if isinstance(r, InitToolRule)}
    limited = {r.tool_name for r in rules if isinstance(r, MaxCountPerStepToolRule)}
    parents: dict[str, set[str]] = {}
    for rule in rules:
        if isinstance(rule, ParentToolRule):
            for child in rule.children:
                parents.setdefault(child, set()).add(rule.tool_name)

    def choice_after(last: str | None) -> set[str]:
        """Every tool the solver might allow right after ``last`` (``None``: the first call)."""
        base = set(everything)
        if last is None and first:
            base &= first
        conditionals: list[ConditionalToolRule] = []
        for rule in rules:
            if rule.tool_name == last and isinstance(rule, ChildToolRule):
                base &= set(rule.children)
            elif rule.tool_name == last and isinstance(rule, ConditionalToolRule):
                conditionals.append(rule)
        base -= {child for child, gates in parents.items() if last not in gates}
        if len(conditionals) > 1:
            return everything  # their children may differ: an empty choice, so the fallback
        # The choices an output may lead to: each mapped child alone, or no constraint at all.
        choices = [base]
        if conditionals:
            rule = conditionals[0]
            children = {*rule.child_output_mapping.values(), *([rule.default_child] if rule.default_child else [])}
            open_ended = not rule.default_child and not rule.require_output_mapping
            choices = [base & {child} for child in children] + ([base] if open_ended else [])
        found: set[str] = set()
        for allowed in choices:
            # An empty choice makes the solver allow every tool, and a choice made only of tools
            # with a max_count_per_step rule may run empty once their counts are used up.
            found |= everything if not allowed or allowed <= limited else allowed
        return found

    reached: set[str] = set()
    pending: list[str | None] = [None]
    while pending:
        for name in choice_after(pending.pop()):
            if name not in reached:
                reached.add(name)
                pending.append(name)
    return reached
