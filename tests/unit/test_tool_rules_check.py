"""Checking an agent's tool rules before they are stored: contradictions, repeats, unreachable tools."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from nightshift.domain.solver import ToolRulesSolver, UnmappedToolOutput
from nightshift.domain.tool_rules import (
    ToolRule,
    check_tool_rules,
    dedupe_tool_rules,
    parse_tool_rules,
    reachable_tools,
)
from nightshift.errors import InvalidInput

TOOLS = ["search", "fetch", "summarize", "send_message"]


def rules(*raw: dict[str, Any]) -> tuple[ToolRule, ...]:
    return parse_tool_rules(raw)


def child(tool: str, *children: str) -> dict[str, Any]:
    return {"type": "constrain_child_tools", "tool_name": tool, "children": list(children)}


def test_repeated_identical_rules_are_dropped_in_order() -> None:
    given = rules(
        {"type": "exit_loop", "tool_name": "send_message"},
        child("search", "fetch"),
        {"type": "exit_loop", "tool_name": "send_message"},
        child("search", "fetch"),
        child("search", "summarize"),
    )
    assert dedupe_tool_rules(given) == [given[0], given[1], given[4]]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (
            [{"type": "exit_loop", "tool_name": "search"}, {"type": "continue_loop", "tool_name": "search"}],
            "both exit_loop",
        ),
        (
            [{"type": "run_first", "tool_name": "search"}, {"type": "run_first", "tool_name": "fetch"}],
            "run_first names 2 tools (search, fetch)",
        ),
        ([child("search")], "no children"),
        ([{"type": "parent_last_tool", "tool_name": "search", "children": []}], "no children"),
        ([{"type": "conditional", "tool_name": "search", "child_output_mapping": {}}], "names no child"),
        ([{"type": "max_count_per_step", "tool_name": "search", "max_count_limit": 1001}], "at most 1000"),
        (
            [
                {"type": "run_first", "tool_name": "search"},
                child("search", "fetch"),
                child("fetch", "search"),
                {"type": "required_before_exit", "tool_name": "send_message"},
            ],
            "required_before_exit names send_message",
        ),
    ],
)
def test_contradictions_are_refused_saying_why(raw: list[dict[str, Any]], says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_tool_rules(rules(*raw), TOOLS)
    assert says in caught.value.message
    assert caught.value.field == "tool_rules"


@pytest.mark.parametrize(
    "raw",
    [
        [],
        [{"type": "run_first", "tool_name": "search"}, {"type": "run_first", "tool_name": "search"}],
        [{"type": "exit_loop", "tool_name": "send_message"}, {"type": "continue_loop", "tool_name": "search"}],
        [{"type": "required_before_exit", "tool_name": "summarize"}],
        # Rules may name tools the agent lacks (Letta accepts them: the tool may come later).
        [
            {"type": "exit_loop", "tool_name": "nope"},
            child("search", "nope", "fetch"),
            {"type": "required_before_exit", "tool_name": "nope"},
        ],
        # A gated child is reachable through its parent.
        [
            {"type": "parent_last_tool", "tool_name": "fetch", "children": ["summarize"]},
            {"type": "required_before_exit", "tool_name": "summarize"},
        ],
        # After a chain of child rules ends, every tool is open again.
        [
            {"type": "run_first", "tool_name": "search"},
            child("search", "fetch"),
            {"type": "required_before_exit", "tool_name": "send_message"},
        ],
        # A limited tool that is the only choice runs out, and the solver then allows everything.
        [
            {"type": "run_first", "tool_name": "search"},
            child("search", "search"),
            {"type": "max_count_per_step", "tool_name": "search", "max_count_limit": 2},
            {"type": "required_before_exit", "tool_name": "send_message"},
        ],
        # A conditional rule without a default may leave the next choice open.
        [
            {"type": "run_first", "tool_name": "search"},
            {"type": "conditional", "tool_name": "search", "child_output_mapping": {"x": "search"}},
            {"type": "required_before_exit", "tool_name": "send_message"},
        ],
    ],
)
def test_consistent_rules_pass(raw: list[dict[str, Any]]) -> None:
    check_tool_rules(rules(*raw), TOOLS)


def test_reachable_tools_follow_the_rules() -> None:
    cycle = rules({"type": "run_first", "tool_name": "search"}, child("search", "fetch"), child("fetch", "search"))
    assert reachable_tools(cycle, TOOLS) == {"search", "fetch"}
    gated = rules(
        {"type": "run_first", "tool_name": "search"},
        child("search", "search"),
        {"type": "parent_last_tool", "tool_name": "fetch", "children": ["summarize"]},
    )
    assert reachable_tools(gated, TOOLS) == {"search"}
    required = rules(
        {"type": "run_first", "tool_name": "search"},
        {
            "type": "conditional",
            "tool_name": "search",
            "child_output_mapping": {"a": "fetch"},
            "require_output_mapping": True,
        },
        child("fetch", "search"),
    )
    assert reachable_tools(required, TOOLS) == {"search", "fetch"}
    assert reachable_tools((), TOOLS) == set(TOOLS)


# --- the reachability check never refuses what the solver would allow -----------------------------


def _random_rules(rng: random.Random) -> list[dict[str, Any]]:
    def tool() -> str:
        return rng.choice(TOOLS)

    def some() -> list[str]:
        return rng.sample(TOOLS, rng.randint(1, 2))

    makers: list[Callable[[], dict[str, Any]]] = [
        lambda: {"type": "run_first", "tool_name": tool()},
        lambda: {"type": "exit_loop", "tool_name": tool()},
        lambda: child(tool(), *some()),
        lambda: {"type": "parent_last_tool", "tool_name": tool(), "children": some()},
        lambda: {"type": "max_count_per_step", "tool_name": tool(), "max_count_limit": rng.randint(1, 2)},
        lambda: {
            "type": "conditional",
            "tool_name": tool(),
            "child_output_mapping": {"a": tool(), "b": tool()},
            **({"default_child": tool()} if rng.random() < 0.5 else {}),
            "require_output_mapping": rng.random() < 0.5,
        },
    ]
    return [rng.choice(makers)() for _ in range(rng.randint(1, 4))]


def _called_by_some_run(raw: list[dict[str, Any]], depth: int = 6) -> set[str]:
    """Every tool the real solver allows in some run of at most ``depth`` calls, outputs "a", "b" or "c"."""
    parsed = rules(*raw)
    called: set[str] = set()
    frontier = [ToolRulesSolver(parsed)]
    # What the solver's next answer depends on: the last call, its output, and the counts of calls
    # (the random rules limit a tool to 2 at most, so higher counts all act alike).
    seen: set[tuple[str | None, str | None, tuple[int, ...]]] = set()
    for _ in range(depth):
        following = []
        for solver in frontier:
            try:
                allowed = solver.allowed_tools(TOOLS)
            except UnmappedToolOutput:
                continue  # the run stops here
            for name in allowed:
                called.add(name)
                for output in ("a", "b", "c"):
                    after = solver.register(name, output)
                    counts = tuple(min(after.state.history.count(t), 2) for t in TOOLS)
                    key = (name, output, counts)
                    if key not in seen:
                        seen.add(key)
                        following.append(after)
        frontier = following
    return called


def test_reachable_tools_include_every_tool_a_real_run_can_call() -> None:
    rng = random.Random(20261130)
    for _ in range(300):
        raw = _random_rules(rng)
        assert _called_by_some_run(raw) <= reachable_tools(rules(*raw), TOOLS), raw
