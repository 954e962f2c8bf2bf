"""The tool-rule solver: allowed tools per rule type, loop decisions, and the saved state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nightshift.domain.solver import (
    SOLVER_STATE_VERSION,
    Decision,
    Reason,
    SolverState,
    ToolRulesSolver,
    UnmappedToolOutput,
)
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
    parse_tool_rules,
)
from nightshift.errors import InvalidInput

TOOLS = ["search", "fetch", "summarize", "send_message"]


def solver_after(rules: list[ToolRule], *calls: tuple[str, str | None]) -> ToolRulesSolver:
    solver = ToolRulesSolver(rules)
    for name, output in calls:
        solver = solver.register(name, output)
    return solver


# --- allowed_tools -------------------------------------------------------------------------------


def test_no_rules_allows_every_tool_in_the_given_order_without_duplicates() -> None:
    solver = ToolRulesSolver([])
    assert solver.allowed_tools(["b", "a", "b", "c"]) == ["b", "a", "c"]
    assert solver.register("a", "x").allowed_tools(TOOLS) == TOOLS


def test_run_first_allows_only_the_first_tools_before_any_call() -> None:
    rules: list[ToolRule] = [InitToolRule(tool_name="send_message"), InitToolRule(tool_name="search")]
    solver = ToolRulesSolver(rules)
    assert solver.allowed_tools(TOOLS) == ["search", "send_message"]
    assert solver.register("search", "ok").allowed_tools(TOOLS) == TOOLS


def test_run_first_tool_not_available_falls_back_to_every_tool() -> None:
    solver = ToolRulesSolver([InitToolRule(tool_name="missing")])
    assert solver.allowed_tools(TOOLS) == TOOLS


def test_child_rule_allows_only_children_after_its_tool() -> None:
    rules: list[ToolRule] = [ChildToolRule(tool_name="search", children=["summarize", "fetch"])]
    assert solver_after(rules, ("search", "r")).allowed_tools(TOOLS) == ["fetch", "summarize"]
    assert solver_after(rules, ("fetch", "r")).allowed_tools(TOOLS) == TOOLS
    assert solver_after(rules, ("search", "r"), ("fetch", "r")).allowed_tools(TOOLS) == TOOLS


def test_child_rule_children_are_intersected_with_available() -> None:
    rules: list[ToolRule] = [ChildToolRule(tool_name="search", children=["fetch", "gone"])]
    assert solver_after(rules, ("search", None)).allowed_tools(TOOLS) == ["fetch"]


def test_two_child_rules_on_one_tool_allow_only_their_common_children() -> None:
    rules: list[ToolRule] = [
        ChildToolRule(tool_name="search", children=["fetch", "summarize"]),
        ChildToolRule(tool_name="search", children=["summarize", "send_message"]),
    ]
    assert solver_after(rules, ("search", None)).allowed_tools(TOOLS) == ["summarize"]


def test_run_first_then_a_chain_of_child_rules() -> None:
    rules: list[ToolRule] = [
        InitToolRule(tool_name="search"),
        ChildToolRule(tool_name="search", children=["fetch"]),
        ChildToolRule(tool_name="fetch", children=["summarize"]),
        ChildToolRule(tool_name="summarize", children=["send_message"]),
        TerminalToolRule(tool_name="send_message"),
    ]
    solver = ToolRulesSolver(rules)
    seen = []
    for _ in range(4):
        allowed = solver.allowed_tools(TOOLS)
        seen.append(allowed)
        solver = solver.register(allowed[0], "done")
    assert seen == [["search"], ["fetch"], ["summarize"], ["send_message"]]
    assert solver.decide("send_message", request_heartbeat=True) == Decision(continues=False, reason=Reason.EXIT_LOOP)


CONDITIONAL = ConditionalToolRule(
    tool_name="search",
    child_output_mapping={"found": "fetch", "true": "summarize", "2": "send_message"},
    default_child=None,
)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("found", ["fetch"]),
        ("  found\n", ["fetch"]),  # surrounding whitespace is ignored
        ('"found"', ["fetch"]),  # a JSON string
        ('{"status": "OK", "message": "found", "time": "now"}', ["fetch"]),  # Letta's envelope
        ("True", ["summarize"]),  # str(True) from a Python tool
        ("TRUE", ["summarize"]),
        ("true", ["summarize"]),
        ('{"message": true}', ["summarize"]),
        ("2.0", ["send_message"]),  # numbers compare by value
        ("2", ["send_message"]),
        ('{"message": 2}', ["send_message"]),
        ("1", TOOLS),  # a number never matches a boolean key
        ("Found", TOOLS),  # text is case-sensitive
        ("not json {", TOOLS),
        ('{"other": "found"}', TOOLS),  # a dict without "message" is compared as a whole
        (None, TOOLS),
    ],
)
def test_conditional_maps_the_output_to_one_child(output: str | None, expected: list[str]) -> None:
    assert solver_after([CONDITIONAL], ("search", output)).allowed_tools(TOOLS) == expected


def test_conditional_maps_a_boolean_output_to_a_capitalised_key() -> None:
    rule = ConditionalToolRule(tool_name="search", child_output_mapping={"False": "fetch"})
    assert solver_after([rule], ("search", "false")).allowed_tools(TOOLS) == ["fetch"]
    assert solver_after([rule], ("search", "0")).allowed_tools(TOOLS) == TOOLS


def test_conditional_first_matching_key_wins() -> None:
    rule = ConditionalToolRule(tool_name="search", child_output_mapping={"1": "fetch", "1.0": "summarize"})
    assert solver_after([rule], ("search", "1.0")).allowed_tools(TOOLS) == ["fetch"]


def test_conditional_without_a_match_uses_the_default_child() -> None:
    rule = CONDITIONAL.model_copy(update={"default_child": "send_message", "require_output_mapping": True})
    assert solver_after([rule], ("search", "nothing")).allowed_tools(TOOLS) == ["send_message"]
    assert solver_after([rule], ("search", None)).allowed_tools(TOOLS) == ["send_message"]
    assert solver_after([rule], ("search", "found")).allowed_tools(TOOLS) == ["fetch"]


@pytest.mark.parametrize("output", ["nothing", None])
def test_conditional_requiring_a_mapping_raises_when_nothing_matches(output: str | None) -> None:
    rule = CONDITIONAL.model_copy(update={"require_output_mapping": True})
    solver = solver_after([rule], ("search", output))
    with pytest.raises(UnmappedToolOutput) as info:
        solver.allowed_tools(TOOLS)
    assert isinstance(info.value, InvalidInput)
    assert info.value.field == "tool_rules"
    assert "'search'" in info.value.message


def test_conditional_only_applies_right_after_its_tool() -> None:
    rule = CONDITIONAL.model_copy(update={"require_output_mapping": True})
    assert solver_after([rule], ("search", "found"), ("fetch", "x")).allowed_tools(TOOLS) == TOOLS


def test_conditional_child_not_available_falls_back_to_every_tool() -> None:
    rule = ConditionalToolRule(tool_name="search", child_output_mapping={"x": "gone"})
    assert solver_after([rule], ("search", "x")).allowed_tools(TOOLS) == TOOLS


def test_max_count_removes_a_tool_once_its_limit_is_reached() -> None:
    rules: list[ToolRule] = [MaxCountPerStepToolRule(tool_name="search", max_count_limit=2)]
    assert solver_after(rules, ("search", None)).allowed_tools(TOOLS) == TOOLS
    after_two = solver_after(rules, ("search", None), ("fetch", None), ("search", None))
    assert after_two.allowed_tools(TOOLS) == ["fetch", "summarize", "send_message"]


def test_max_count_combines_with_a_child_rule() -> None:
    rules: list[ToolRule] = [
        ChildToolRule(tool_name="search", children=["search", "send_message"]),
        MaxCountPerStepToolRule(tool_name="search", max_count_limit=1),
    ]
    assert solver_after(rules, ("search", None)).allowed_tools(TOOLS) == ["send_message"]


def test_parent_last_tool_gates_its_children() -> None:
    rules: list[ToolRule] = [ParentToolRule(tool_name="search", children=["fetch", "summarize"])]
    assert ToolRulesSolver(rules).allowed_tools(TOOLS) == ["search", "send_message"]
    # right after the parent every tool is allowed: the parent does not force its children
    assert solver_after(rules, ("search", None)).allowed_tools(TOOLS) == TOOLS
    assert solver_after(rules, ("search", None), ("fetch", None)).allowed_tools(TOOLS) == [
        "search",
        "send_message",
    ]


def test_a_child_of_two_parents_is_allowed_after_either() -> None:
    rules: list[ToolRule] = [
        ParentToolRule(tool_name="search", children=["summarize"]),
        ParentToolRule(tool_name="fetch", children=["summarize"]),
    ]
    assert solver_after(rules, ("fetch", None)).allowed_tools(TOOLS) == TOOLS
    assert solver_after(rules, ("search", None)).allowed_tools(TOOLS) == TOOLS
    assert solver_after(rules, ("send_message", None)).allowed_tools(TOOLS) == [
        "search",
        "fetch",
        "send_message",
    ]


def test_run_first_naming_a_gated_child_falls_back_to_every_tool() -> None:
    rules: list[ToolRule] = [
        InitToolRule(tool_name="fetch"),
        ParentToolRule(tool_name="search", children=["fetch"]),
    ]
    assert ToolRulesSolver(rules).allowed_tools(TOOLS) == TOOLS


def test_contradicting_rules_fall_back_to_every_available_tool() -> None:
    rules: list[ToolRule] = [
        ChildToolRule(tool_name="search", children=["fetch"]),
        MaxCountPerStepToolRule(tool_name="fetch", max_count_limit=1),
    ]
    solver = solver_after(rules, ("fetch", None), ("search", None))
    assert solver.allowed_tools(TOOLS) == TOOLS
    assert solver.allowed_tools([]) == []


# --- decide --------------------------------------------------------------------------------------

DECIDE_RULES: list[ToolRule] = [
    TerminalToolRule(tool_name="send_message"),
    ContinueToolRule(tool_name="fetch"),
    ChildToolRule(tool_name="search", children=["fetch"]),
    ConditionalToolRule(tool_name="classify", child_output_mapping={"a": "fetch"}),
    TerminalToolRule(tool_name="both"),
    ContinueToolRule(tool_name="both"),
    MaxCountPerStepToolRule(tool_name="summarize", max_count_limit=3),
]


@pytest.mark.parametrize(
    ("tool", "heartbeat", "continues", "reason"),
    [
        ("send_message", True, False, "exit_loop"),
        ("send_message", False, False, "exit_loop"),
        ("fetch", False, True, "continue_loop"),
        ("search", False, True, "child_rule"),
        ("classify", False, True, "child_rule"),
        ("both", True, False, "exit_loop"),  # exit_loop wins over continue_loop
        ("summarize", True, True, "heartbeat"),  # max_count does not hold the loop open
        ("summarize", False, False, "no_heartbeat"),
        ("plain", True, True, "heartbeat"),
        ("plain", False, False, "no_heartbeat"),
    ],
)
def test_decide(tool: str, heartbeat: bool, continues: bool, reason: str) -> None:
    decision = solver_after(DECIDE_RULES, (tool, "a")).decide(tool, request_heartbeat=heartbeat)
    assert (decision.continues, decision.reason) == (continues, reason)


REQUIRED: list[ToolRule] = [
    RequiredBeforeExitToolRule(tool_name="summarize"),
    RequiredBeforeExitToolRule(tool_name="fetch"),
    TerminalToolRule(tool_name="send_message"),
]


@pytest.mark.parametrize(("tool", "heartbeat"), [("send_message", True), ("search", False)])
def test_required_before_exit_holds_the_loop_open(tool: str, heartbeat: bool) -> None:
    solver = solver_after(REQUIRED, ("summarize", None), (tool, None))
    assert solver.pending_required() == ["fetch"]
    assert solver.decide(tool, request_heartbeat=heartbeat) == Decision(
        continues=True, reason=Reason.REQUIRED_BEFORE_EXIT
    )


def test_required_before_exit_lets_the_loop_end_once_every_required_tool_ran() -> None:
    solver = solver_after(REQUIRED, ("fetch", None), ("summarize", None), ("send_message", None))
    assert solver.pending_required() == []
    assert solver.decide("send_message", request_heartbeat=False).reason == Reason.EXIT_LOOP


def test_required_before_exit_does_not_change_a_continuing_decision() -> None:
    solver = solver_after(REQUIRED, ("search", None))
    assert solver.decide("search", request_heartbeat=True).reason == Reason.HEARTBEAT
    assert solver.allowed_tools(TOOLS) == TOOLS  # required tools are not forced


def test_required_tools_that_are_not_available_do_not_hold_the_loop_open() -> None:
    solver = solver_after(REQUIRED, ("summarize", None), ("send_message", None))
    decision = solver.decide("send_message", request_heartbeat=False, available=["summarize", "send_message"])
    assert decision.reason == Reason.EXIT_LOOP
    assert solver.pending_required(["summarize", "send_message"]) == []


def test_a_text_only_answer_ends_the_loop_unless_a_required_tool_is_pending() -> None:
    assert ToolRulesSolver([]).decide(None, request_heartbeat=False).reason == Reason.NO_HEARTBEAT
    held = solver_after(REQUIRED, ("search", None)).decide(None, request_heartbeat=False)
    assert held == Decision(continues=True, reason=Reason.REQUIRED_BEFORE_EXIT)


@pytest.mark.parametrize("calls", [(), (("search", None),)])
def test_decide_refuses_a_tool_that_was_not_registered_last(calls: tuple[tuple[str, None], ...]) -> None:
    with pytest.raises(ValueError, match="register 'fetch'"):
        solver_after([], *calls).decide("fetch", request_heartbeat=True)


# --- state ---------------------------------------------------------------------------------------


def test_register_returns_a_new_solver_and_leaves_the_old_one_unchanged() -> None:
    first = ToolRulesSolver([InitToolRule(tool_name="search")])
    second = first.register("search", "out")
    assert first.state == SolverState()
    assert first.last_tool is None
    assert second.state == SolverState(history=("search",), last_output="out")
    assert second.last_tool == "search"


def test_state_json_round_trip_through_text() -> None:
    state = SolverState(history=("search", "fetch", "search"), last_output='{"message": "found"}')
    data = state.to_json()
    assert data == {
        "schema_version": SOLVER_STATE_VERSION,
        "history": ["search", "fetch", "search"],
        "last_output": '{"message": "found"}',
    }
    assert SolverState.from_json(json.loads(json.dumps(data))) == state
    assert SolverState.from_json(SolverState().to_json()) == SolverState()


def test_a_resumed_solver_decides_like_the_original() -> None:
    rules: list[ToolRule] = [CONDITIONAL, MaxCountPerStepToolRule(tool_name="fetch", max_count_limit=1)]
    original = solver_after(rules, ("fetch", None), ("search", "true"))
    resumed = ToolRulesSolver(rules, SolverState.from_json(json.loads(json.dumps(original.state.to_json()))))
    assert resumed.allowed_tools(TOOLS) == original.allowed_tools(TOOLS) == ["summarize"]


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_state_from_json_rejects_an_unknown_schema_version(version: Any) -> None:
    data = {"schema_version": version, "history": [], "last_output": None}
    with pytest.raises(ValueError, match="schema_version"):
        SolverState.from_json(data)


def test_state_from_json_rejects_a_missing_schema_version() -> None:
    with pytest.raises(ValueError, match="schema_version"):
        SolverState.from_json({"history": [], "last_output": None})


@pytest.mark.parametrize(
    "data",
    [
        {"schema_version": 1, "history": "search", "last_output": None},
        {"schema_version": 1, "history": ["search", 3], "last_output": None},
        {"schema_version": 1, "last_output": None},
        {"schema_version": 1, "history": [], "last_output": 5},
    ],
)
def test_state_from_json_rejects_a_malformed_state(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="solver state"):
        SolverState.from_json(data)


def test_rules_parsed_from_the_wire_drive_the_solver() -> None:
    rules = parse_tool_rules(
        [
            {"type": "run_first", "tool_name": "search"},
            {
                "type": "conditional",
                "tool_name": "search",
                "child_output_mapping": {"found": "fetch"},
                "default_child": "send_message",
            },
            {"type": "exit_loop", "tool_name": "send_message"},
        ]
    )
    solver = ToolRulesSolver(rules)
    assert solver.allowed_tools(TOOLS) == ["search"]
    solver = solver.register("search", "nothing")
    assert solver.decide("search", request_heartbeat=False).reason == Reason.CHILD_RULE
    assert solver.allowed_tools(TOOLS) == ["send_message"]
