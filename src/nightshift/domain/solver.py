"""The tool-rule solver: which tools an agent may call next, and whether its loop goes on.

Pure logic, no I/O. The runtime asks ``allowed_tools`` before each model call, ``register``s the
call the model made (with the tool's output), then asks ``decide``. What the solver remembers is a
``SolverState``, saved between steps as versioned JSON (a step may resume hours later elsewhere).

Which tools are allowed: start from ``available`` (order kept, duplicates dropped), then apply
every rule below; each one narrows the set and they all hold at once (an intersection):

1. ``run_first``: before any call, only the run_first tools.
2. ``constrain_child_tools``: after a tool with a child rule, only its ``children``.
3. ``conditional``: after a tool with a conditional rule, only the child mapped from its output,
   else ``default_child``; with neither, ``require_output_mapping`` raises ``UnmappedToolOutput``,
   otherwise this rule allows everything.
4. ``max_count_per_step``: a tool already called ``max_count_limit`` times in the history is out.
5. ``parent_last_tool``: a child of a parent rule is allowed only right after that parent (and a
   tool that is a child of several parents, right after any of them). Unlike Letta, calling the
   parent does not restrict the next call to its children: use a child rule for that.

If the rules leave nothing (they contradict each other, or name tools that are not available),
every available tool is allowed instead: a provider request that forces a tool call needs at least
one tool, and a model that may call anything beats an agent stuck for good.

How a conditional output is matched against a mapping key (both are text): the raw output equals
the key; or else the output is JSON-decoded when it can be (a dict with a ``"message"`` key, Letta's
tool-return envelope, stands for that message) and both sides are compared after normalising:
surrounding whitespace dropped, ``true``/``false`` in any case are booleans, numbers compare by
value (``"1"`` matches ``1.0``), anything else compares as text. A boolean never matches a number.
Keys are tried in the mapping's order; the first match wins.

Whether the loop continues after a turn's calls (first match wins; a turn of several calls
matches a rule when any of its calls does):

1. ``exit_loop`` tool -> ends (even if the tool also has a continue or child rule);
2. ``continue_loop`` tool -> continues;
3. a tool with a child or conditional rule -> continues (its children must get their turn);
4. otherwise the model's ``request_heartbeat`` decides.

Then ``required_before_exit`` overrides an end: while a required tool (one that is available, when
the caller says which are) has not been called, the loop continues, also past an ``exit_loop``
tool, as in Letta. ``allowed_tools`` does not force the required tools; the runtime may name them
to the model (``pending_required``). The step limit is the runtime's job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from nightshift.domain.fast_init import fast_init
from nightshift.domain.tool_rules import (
    ChildToolRule,
    ConditionalToolRule,
    ContinueToolRule,
    InitToolRule,
    MaxCountPerStepToolRule,
    ParentToolRule,
    RequiredBeforeExitToolRule,
    TerminalToolRule,
    ToolRule,
)
from nightshift.errors import InvalidInput

SOLVER_STATE_VERSION = 1


class UnmappedToolOutput(InvalidInput):
    """A conditional rule with ``require_output_mapping`` met an output none of its keys match."""


class Reason(StrEnum):
    """Why the loop continues or ends after a call (``Decision.reason``)."""

    EXIT_LOOP = "exit_loop"  # ends: the tool has an exit_loop rule
    CONTINUE_LOOP = "continue_loop"  # continues: the tool has a continue_loop rule
    CHILD_RULE = "child_rule"  # continues: the tool has a child or conditional rule
    HEARTBEAT = "heartbeat"  # continues: the model asked to be called again
    NO_HEARTBEAT = "no_heartbeat"  # ends: the model did not ask to be called again
    REQUIRED_BEFORE_EXIT = "required_before_exit"  # continues: a required tool is still uncalled


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Whether the agent's loop continues after a call, and why."""

    continues: bool
    reason: Reason


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class SolverState:
    """What the solver remembers of the run so far: the tools called, in order, and the last output."""

    history: tuple[str, ...] = ()
    last_output: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The state as JSON-ready data, with its ``schema_version``."""
        return {
            "schema_version": SOLVER_STATE_VERSION,
            "history": list(self.history),
            "last_output": self.last_output,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SolverState:
        """Read a saved state; raise ``ValueError`` on an unknown version or a malformed state."""
        version = data.get("schema_version")
        if version != SOLVER_STATE_VERSION:
            raise ValueError(f"unknown solver state schema_version {version!r}")
        history = data.get("history")
        if not isinstance(history, list) or not all(isinstance(name, str) for name in history):
            raise ValueError("solver state history must be a list of tool names")
        last_output = data.get("last_output")
        if last_output is not None and not isinstance(last_output, str):
            raise ValueError("solver state last_output must be a string or null")
        return cls(history=tuple(history), last_output=last_output)


class ToolRulesSolver:
    """Applies an agent's tool rules to the run's history. Immutable: ``register`` returns a new one."""

    __slots__ = ("_rules", "_state")

    def __init__(self, rules: Sequence[ToolRule], state: SolverState | None = None) -> None:
        self._rules = tuple(rules)
        self._state = state if state is not None else SolverState()

    @property
    def state(self) -> SolverState:
        """The state to save with the step."""
        return self._state

    @property
    def last_tool(self) -> str | None:
        """The tool called last, if any."""
        return self._state.history[-1] if self._state.history else None

    def register(self, tool_name: str, output: str | None) -> ToolRulesSolver:
        """A solver that also remembers this call and its output (``None`` if it had none)."""
        state = SolverState(history=(*self._state.history, tool_name), last_output=output)
        return ToolRulesSolver(self._rules, state)

    def allowed_tools(self, available: Sequence[str]) -> list[str]:
        """The tools the model may call next, in the order of ``available`` (see the module doc).

        Raises:
            UnmappedToolOutput: a conditional rule requires a mapped output and none matched.
        """
        tools = list(dict.fromkeys(available))
        allowed = set(tools)
        last = self.last_tool
        history = self._state.history
        if last is None:
            first = {r.tool_name for r in self._rules if isinstance(r, InitToolRule)}
            if first:
                allowed &= first
        for rule in self._rules:
            if isinstance(rule, ChildToolRule) and rule.tool_name == last:
                allowed &= set(rule.children)
            elif isinstance(rule, ConditionalToolRule) and rule.tool_name == last:
                child = _conditional_child(rule, self._state.last_output)
                if child is not None:
                    allowed &= {child}
            elif isinstance(rule, MaxCountPerStepToolRule):
                if history.count(rule.tool_name) >= rule.max_count_limit:
                    allowed.discard(rule.tool_name)
        gated: dict[str, set[str]] = {}
        for rule in self._rules:
            if isinstance(rule, ParentToolRule):
                for child_name in rule.children:
                    gated.setdefault(child_name, set()).add(rule.tool_name)
        allowed -= {name for name, parents in gated.items() if last not in parents}
        if not allowed:
            return tools
        return [name for name in tools if name in allowed]

    def pending_required(self, available: Sequence[str] | None = None) -> list[str]:
        """The required_before_exit tools not called yet (only those in ``available``, if given)."""
        called = set(self._state.history)
        names = dict.fromkeys(r.tool_name for r in self._rules if isinstance(r, RequiredBeforeExitToolRule))
        return [name for name in names if name not in called and (available is None or name in available)]

    def decide(
        self, tool_name: str | None, *, request_heartbeat: bool, available: Sequence[str] | None = None
    ) -> Decision:
        """After a call to ``tool_name`` (already registered), does the loop continue?

        Args:
            tool_name: the tool just called, or ``None`` when the model answered with text only.
            request_heartbeat: whether the model asked to be called again.
            available: the agent's tools; when given, a required_before_exit tool that is not
                among them cannot hold the loop open.

        Raises:
            ValueError: ``tool_name`` is not the last registered call.
        """
        if tool_name is not None and tool_name != self.last_tool:
            raise ValueError(f"register {tool_name!r} before deciding on it")
        return self.decide_turn(() if tool_name is None else (tool_name,), request_heartbeat, available=available)

    def decide_turn(
        self, tool_names: Sequence[str], request_heartbeat: bool, *, available: Sequence[str] | None = None
    ) -> Decision:
        """After the calls of one turn (all registered, in order), does the loop continue?

        Args:
            tool_names: the tools the turn called and that ran (none: a text answer).
            request_heartbeat: whether the model asked to be called again (by any call).
            available: as for ``decide``.
        """
        decision = self._decide_by_rules(set(tool_names), request_heartbeat)
        if not decision.continues and self.pending_required(available):
            return Decision(continues=True, reason=Reason.REQUIRED_BEFORE_EXIT)
        return decision

    def forces_call(self) -> bool:
        """Whether the next answer must be a tool call: a run_first rule before any call, or a child
        or conditional rule on the tool called last. (The memgpt loops always force one; a
        letta_v1 agent may answer in text unless this says otherwise, as in Letta.)"""
        last = self.last_tool
        if last is None:
            return any(isinstance(r, InitToolRule) for r in self._rules)
        return any(isinstance(r, ChildToolRule | ConditionalToolRule) and r.tool_name == last for r in self._rules)

    def is_terminal(self, tool_name: str) -> bool:
        """Whether the tool has an exit_loop rule."""
        return any(isinstance(r, TerminalToolRule) and r.tool_name == tool_name for r in self._rules)

    def needs_output(self, tool_name: str) -> bool:
        """Whether the tools allowed after ``tool_name`` depend on its output (a conditional rule)."""
        return any(isinstance(r, ConditionalToolRule) and r.tool_name == tool_name for r in self._rules)

    def _decide_by_rules(self, tool_names: set[str], request_heartbeat: bool) -> Decision:
        own = [rule for rule in self._rules if rule.tool_name in tool_names]
        if any(isinstance(rule, TerminalToolRule) for rule in own):
            return Decision(continues=False, reason=Reason.EXIT_LOOP)
        if any(isinstance(rule, ContinueToolRule) for rule in own):
            return Decision(continues=True, reason=Reason.CONTINUE_LOOP)
        if any(isinstance(rule, ChildToolRule | ConditionalToolRule) for rule in own):
            return Decision(continues=True, reason=Reason.CHILD_RULE)
        if request_heartbeat:
            return Decision(continues=True, reason=Reason.HEARTBEAT)
        return Decision(continues=False, reason=Reason.NO_HEARTBEAT)


def _conditional_child(rule: ConditionalToolRule, output: str | None) -> str | None:
    """The tool the rule maps ``output`` to, else its default child, else ``None`` (no constraint)."""
    if output is not None:
        value = _decoded(output)
        for key, child in rule.child_output_mapping.items():
            if output == key or _normalised(value) == _normalised(key):
                return child
    if rule.default_child:
        return rule.default_child
    if rule.require_output_mapping:
        raise UnmappedToolOutput(
            f"the output of {rule.tool_name!r} matches none of {sorted(rule.child_output_mapping)} "
            "and the rule requires a match",
            field="tool_rules",
        )
    return None


def _decoded(output: str) -> object:
    try:
        value: object = json.loads(output)
    except ValueError:
        return output
    if isinstance(value, dict) and "message" in value:
        return value["message"]
    return value


def _normalised(value: object) -> tuple[str, object]:
    # Tagged, so that True and 1.0 (equal in Python) stay apart.
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return ("bool", text.lower() == "true")
        try:
            return ("number", float(text))
        except ValueError:
            return ("text", text)
    return ("text", json.dumps(value, sort_keys=True))
