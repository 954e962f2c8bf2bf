"""The step logic (``runtime.step.take_turns``) with plain values: no database, no provider, no process.

The two seams it uses are given small in-memory implementations: a ``MemorySearch`` that finds
nothing and a ``Sandbox`` that answers from a table and records what it was asked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from nightshift.domain.agents import Agent, LLMConfig
from nightshift.domain.batches import StepState
from nightshift.domain.blocks import Block
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.domain.passages import Passage
from nightshift.domain.solver import Reason
from nightshift.domain.tool_rules import (
    ChildToolRule,
    ConditionalToolRule,
    MaxCountPerStepToolRule,
    RequiredBeforeExitToolRule,
    TerminalToolRule,
)
from nightshift.domain.tools import Tool, ToolType
from nightshift.providers.base import ModelResponse
from nightshift.runtime.step import Turn, TurnReason, first_state, take_turns
from nightshift.tools.base import BASE_TOOLS
from nightshift.tools.results import SandboxCall, SandboxResult

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ORG = "org-1"


class NoMemory:
    """A ``MemorySearch`` over an empty memory."""

    async def messages(self, agent_id: str, query: str, *, limit: int, offset: int) -> list[Message]:
        return []

    async def passages(self, agent_id: str, query: str, *, limit: int, offset: int) -> list[Passage]:
        return []


class TableSandbox:
    """A ``Sandbox`` that answers each function by name from a table, and records the calls."""

    def __init__(self, answers: dict[str, SandboxResult]) -> None:
        self.answers = answers
        self.calls: list[SandboxCall] = []
        self.waves: list[list[str]] = []  # the functions of each run_many, in order

    async def run(self, call: SandboxCall, *, timeout: float | None = None) -> SandboxResult:
        self.calls.append(call)
        return self.answers[call.function_name]

    async def run_many(
        self,
        calls: Sequence[SandboxCall],
        *,
        timeout: float | None = None,
    ) -> list[SandboxResult]:
        self.waves.append([call.function_name for call in calls])
        return [await self.run(call) for call in calls]

    async def aclose(self) -> None:
        return None


def ok(value: Any) -> SandboxResult:
    return SandboxResult(ok=True, value=value, error=None, stdout="", stderr="", duration_ms=1.0)


def failed(error: str) -> SandboxResult:
    return SandboxResult(ok=False, value=None, error=error, stdout="", stderr="", duration_ms=1.0)


def tool(name: str, tool_type: ToolType = ToolType.CUSTOM, *, return_char_limit: int = 50_000) -> Tool:
    schema = {"name": name, "description": name, "parameters": {"type": "object", "properties": {}}}
    return Tool(
        id=f"tool-{name}",
        organization_id=ORG,
        name=name,
        description=name,
        json_schema=schema,
        tool_type=tool_type,
        source_code=f"def {name}():\n    pass\n" if tool_type is ToolType.CUSTOM else None,
        return_char_limit=return_char_limit,
        created_at=NOW,
        updated_at=NOW,
    )


BASE = tuple(tool(name, tool_type) for name, (_, tool_type) in BASE_TOOLS.items())


def block(label: str, value: str, *, block_id: str | None = None, limit: int = 100) -> Block:
    return Block(
        id=block_id or f"block-{label}",
        organization_id=ORG,
        label=label,
        value=value,
        limit=limit,
        created_at=NOW,
        updated_at=NOW,
    )


def agent(agent_id: str = "agent-1", **fields: Any) -> Agent:
    values: dict[str, Any] = {
        "id": agent_id,
        "organization_id": ORG,
        "name": agent_id,
        "system": "You are a test agent.",
        "llm_config": LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022"),
        "blocks": (block("human", "Likes tea."),),
        "tools": (*BASE, tool("lookup")),
        "created_at": NOW,
        "updated_at": NOW,
        **fields,
    }
    return Agent(**values)


def answer(
    name: str | None, arguments: str = "{}", *, heartbeat: bool = False, text: str | None = None
) -> ModelResponse:
    calls = (ToolCall(id="call_1", name=name, arguments=arguments),) if name is not None else ()
    return ModelResponse(tool_calls=calls, reasoning="thinking", request_heartbeat=heartbeat, text=text)


def turn(response: ModelResponse, who: Agent | None = None, *, step: int = 0, max_steps: int = 10) -> Turn:
    subject = who or agent()
    state = StepState(
        step_number=step, max_steps=max_steps, allowed_tools=first_state(subject, max_steps).allowed_tools
    )
    return Turn(agent=subject, state=state, response=response)


async def take(turns: list[Turn], sandbox: TableSandbox | None = None) -> list[Any]:
    return list(await take_turns(turns, search=NoMemory(), sandbox=sandbox or TableSandbox({}), now=NOW))


def tool_body(message: Message) -> dict[str, Any]:
    assert message.role is Role.TOOL
    body: dict[str, Any] = json.loads(message.text)
    return body


async def test_send_message_without_a_heartbeat_ends_the_run() -> None:
    (result,) = await take([turn(answer("send_message", '{"message": "hello"}'))])

    assert (result.continues, result.reason) == (False, Reason.NO_HEARTBEAT)
    assistant, tool_message = result.messages
    assert assistant.role is Role.ASSISTANT and assistant.reasoning == "thinking"
    assert assistant.tool_calls[0].name == "send_message"
    assert tool_body(tool_message)["status"] == "OK" and tool_message.tool_call_id == "call_1"
    assert result.state.step_number == 1


async def test_a_heartbeat_asks_for_another_step() -> None:
    (result,) = await take([turn(answer("send_message", '{"message": "more"}', heartbeat=True))])

    assert (result.continues, result.reason) == (True, Reason.HEARTBEAT)


async def test_a_text_answer_is_the_final_word() -> None:
    (result,) = await take([turn(answer(None, text="All done."))])

    assert (result.continues, result.reason) == (False, TurnReason.FINAL_TEXT)
    (only,) = result.messages
    assert only.role is Role.ASSISTANT and only.text == "All done."


async def test_calls_that_cannot_run_are_tool_errors_and_the_agent_gets_another_step() -> None:
    unknown, malformed = await take(
        [turn(answer("teleport")), turn(answer("send_message", "not json"), agent("agent-2"))]
    )

    for result in (unknown, malformed):
        assert (result.continues, result.reason) == (True, TurnReason.TOOL_ERROR)
        assert tool_body(result.messages[1])["status"] == "Failed"
    assert "unknown tool 'teleport'" in (unknown.tool_error or "")
    assert "are not a valid JSON object" in (malformed.tool_error or "")
    # A call that never ran leaves the rules' history as it was.
    assert unknown.state.solver == turn(answer("teleport")).state.solver


async def test_memory_edits_of_a_shared_block_apply_in_turn() -> None:
    shared = block("team", "Start.", block_id="block-shared")
    first, second = agent("agent-1", blocks=(shared,)), agent("agent-2", blocks=(shared,))
    edit = '{"label": "team", "content": "%s"}'

    one, two = await take(
        [
            turn(answer("core_memory_append", edit % "one"), first),
            turn(answer("core_memory_append", edit % "two"), second),
        ]
    )

    assert one.changed_blocks[0].value == "Start.\none"
    assert two.changed_blocks[0].value == "Start.\none\ntwo"  # the second edit saw the first


async def test_an_edit_past_the_block_limit_is_refused() -> None:
    (result,) = await take([turn(answer("core_memory_append", '{"label": "human", "content": "%s"}' % ("x" * 200)))])

    assert result.reason is TurnReason.TOOL_ERROR
    assert result.changed_blocks == ()


async def test_custom_tools_go_to_the_sandbox_with_the_agents_secrets() -> None:
    sandbox = TableSandbox({"lookup": ok({"order": 42, "status": "shipped"})})
    who = agent(secrets={"SHOP_KEY": "k-1"})

    (result,) = await take([turn(answer("lookup", '{"order_id": "42"}', heartbeat=True), who)], sandbox)

    (call,) = sandbox.calls
    assert (call.organization_id, call.function_name, call.arguments) == (ORG, "lookup", {"order_id": "42"})
    assert dict(call.env) == {"SHOP_KEY": "k-1"}
    assert json.loads(tool_body(result.messages[1])["message"]) == {"order": 42, "status": "shipped"}
    assert (result.continues, result.reason) == (True, Reason.HEARTBEAT)


async def test_a_failing_custom_tool_is_a_tool_error() -> None:
    sandbox = TableSandbox({"lookup": failed("ValueError: no such order")})

    (result,) = await take([turn(answer("lookup"), agent())], sandbox)

    assert result.reason is TurnReason.TOOL_ERROR
    assert tool_body(result.messages[1])["message"] == "Error executing function lookup: ValueError: no such order"


async def test_long_results_are_cut_to_the_tools_limit() -> None:
    sandbox = TableSandbox({"lookup": ok("y" * 30)})
    who = agent(tools=(*BASE, tool("lookup", return_char_limit=10)))

    (result,) = await take([turn(answer("lookup"), who)], sandbox)

    assert tool_body(result.messages[1])["message"] == (
        "yyyyyyyyyy... [NOTE: function output was truncated since it exceeded the character limit (30 > 10)]"
    )


async def test_the_step_limit_ends_the_run() -> None:
    (result,) = await take([turn(answer("send_message", '{"message": "m"}', heartbeat=True), step=2, max_steps=3)])

    assert (result.continues, result.reason) == (False, TurnReason.MAX_STEPS)


async def test_an_exit_loop_rule_ends_the_run_even_with_a_heartbeat() -> None:
    who = agent(tool_rules=(TerminalToolRule(tool_name="send_message"),))

    (result,) = await take([turn(answer("send_message", '{"message": "bye"}', heartbeat=True), who)])

    assert (result.continues, result.reason) == (False, Reason.EXIT_LOOP)


async def test_a_bug_a_base_tool_runs_into_is_that_agents_tool_error() -> None:
    # A label of the wrong type reaches core_memory_append's code, which expects a string.
    (bad, good) = await take(
        [
            turn(answer("core_memory_append", '{"label": ["human"], "content": "x"}')),
            turn(answer("send_message", '{"message": "fine"}'), agent("agent-2")),
        ]
    )

    assert bad.reason is TurnReason.TOOL_ERROR and bad.failure is None
    assert (bad.tool_error or "").startswith("Error executing function core_memory_append: TypeError")
    assert good.reason is Reason.NO_HEARTBEAT


# Several tool calls in one turn.


def answers(*calls: tuple[str, str], heartbeat: bool = False) -> ModelResponse:
    """One turn with several calls, ids call_1, call_2, ..."""
    return ModelResponse(
        tool_calls=tuple(ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls, 1)),
        reasoning="thinking",
        request_heartbeat=heartbeat,
    )


def statuses(result: Any) -> list[tuple[str | None, str | None, str]]:
    return [(m.tool_call_id, m.name, tool_body(m)["status"]) for m in result.messages[1:]]


CITIES = (("lookup", '{"city": "Paris"}'), ("lookup", '{"city": "Rome"}'), ("lookup", '{"city": "Oslo"}'))


async def test_three_calls_of_one_turn_are_kept_run_side_by_side_and_answered_in_order() -> None:
    sandbox = TableSandbox({"lookup": ok("sunny")})

    (result,) = await take([turn(answers(*CITIES, heartbeat=True))], sandbox)

    assistant = result.messages[0]
    assert [c.id for c in assistant.tool_calls] == ["call_1", "call_2", "call_3"]
    assert statuses(result) == [("call_1", "lookup", "OK"), ("call_2", "lookup", "OK"), ("call_3", "lookup", "OK")]
    assert sandbox.waves == [["lookup", "lookup", "lookup"]]  # one sandbox round for the three
    assert [c.arguments for c in sandbox.calls] == [{"city": "Paris"}, {"city": "Rome"}, {"city": "Oslo"}]
    assert (result.continues, result.reason) == (True, Reason.HEARTBEAT)
    assert result.state.solver.history == ("lookup", "lookup", "lookup")


async def test_one_failing_call_of_three_is_a_tool_error_and_the_others_still_run() -> None:
    class OsloIsDown(TableSandbox):
        async def run(self, call: SandboxCall, *, timeout: float | None = None) -> SandboxResult:
            self.calls.append(call)
            return failed("TimeoutError: Oslo is down") if call.arguments["city"] == "Oslo" else ok("sunny")

    sandbox = OsloIsDown({})
    (result,) = await take([turn(answers(CITIES[2], CITIES[0], CITIES[1], heartbeat=True))], sandbox)

    assert statuses(result) == [("call_1", "lookup", "Failed"), ("call_2", "lookup", "OK"), ("call_3", "lookup", "OK")]
    assert tool_body(result.messages[1])["message"] == "Error executing function lookup: TimeoutError: Oslo is down"
    assert (result.continues, result.reason) == (True, TurnReason.TOOL_ERROR)
    assert result.tool_error == "Error executing function lookup: TimeoutError: Oslo is down"
    # A call that ran and failed counts for the rules like the others.
    assert result.state.solver.history == ("lookup", "lookup", "lookup")


async def test_the_rules_judge_each_call_as_the_calls_before_it_left_them() -> None:
    who = agent(tool_rules=(MaxCountPerStepToolRule(tool_name="lookup", max_count_limit=2),))
    sandbox = TableSandbox({"lookup": ok("sunny")})

    (result,) = await take([turn(answers(*CITIES, heartbeat=True), who)], sandbox)

    assert statuses(result) == [("call_1", "lookup", "OK"), ("call_2", "lookup", "OK"), ("call_3", "lookup", "Failed")]
    assert "not allowed after the calls before it in this turn" in tool_body(result.messages[3])["message"]
    assert len(sandbox.calls) == 2
    assert result.state.solver.history == ("lookup", "lookup")  # the refused call did not count
    assert result.reason is TurnReason.TOOL_ERROR


async def test_a_child_rule_limits_the_next_call_of_the_same_turn() -> None:
    who = agent(tool_rules=(ChildToolRule(tool_name="lookup", children=("send_message",)),))
    note = ("core_memory_append", '{"label": "human", "content": "in Paris"}')

    (result,) = await take([turn(answers(CITIES[0], note), who)], TableSandbox({"lookup": ok("sunny")}))

    assert statuses(result) == [("call_1", "lookup", "OK"), ("call_2", "core_memory_append", "Failed")]
    assert result.changed_blocks == ()
    assert result.state.allowed_tools == ("send_message",)


async def test_a_conditional_rule_waits_for_the_output_before_the_next_call() -> None:
    rule = ConditionalToolRule(tool_name="lookup", child_output_mapping={"sunny": "send_message"})
    who = agent(tool_rules=(rule,))
    sandbox = TableSandbox({"lookup": ok("sunny")})

    (result,) = await take([turn(answers(CITIES[0], CITIES[1]), who)], sandbox)

    # The second lookup was judged on the first one's output ("sunny" allows only send_message).
    assert statuses(result) == [("call_1", "lookup", "OK"), ("call_2", "lookup", "Failed")]
    assert sandbox.waves == [["lookup"]]


async def test_calls_run_in_order_a_base_tool_after_custom_ones_waits_for_them() -> None:
    sandbox = TableSandbox({"lookup": ok("sunny")})
    note = ("core_memory_append", '{"label": "human", "content": "asked about the weather"}')

    (result,) = await take([turn(answers(CITIES[0], CITIES[1], note, CITIES[2], heartbeat=True))], sandbox)

    assert sandbox.waves == [["lookup", "lookup"], ["lookup"]]
    assert [status for _, _, status in statuses(result)] == ["OK", "OK", "OK", "OK"]
    assert result.changed_blocks[0].value == "Likes tea.\nasked about the weather"
    assert result.state.solver.history == ("lookup", "lookup", "core_memory_append", "lookup")


async def test_send_message_with_other_calls_ends_the_run_in_this_round() -> None:
    note = ("core_memory_append", '{"label": "human", "content": "lives in Lyon"}')
    said = ("send_message", '{"message": "Noted!"}')

    (result,) = await take([turn(answers(note, said, heartbeat=True))])

    assert (result.continues, result.reason) == (False, TurnReason.SENT_MESSAGE)
    assert statuses(result) == [("call_1", "core_memory_append", "OK"), ("call_2", "send_message", "OK")]
    assert result.changed_blocks[0].value == "Likes tea.\nlives in Lyon"


async def test_a_terminal_call_ends_the_run_after_the_turns_other_calls_ran() -> None:
    who = agent(tool_rules=(TerminalToolRule(tool_name="send_message"),))
    sandbox = TableSandbox({"lookup": ok("sunny")})
    said = ("send_message", '{"message": "Looking it up."}')

    (result,) = await take([turn(answers(said, CITIES[0], CITIES[1], heartbeat=True), who)], sandbox)

    assert (result.continues, result.reason) == (False, Reason.EXIT_LOOP)
    assert len(sandbox.calls) == 2 and len(result.messages) == 4


async def test_a_required_tool_keeps_the_run_open_past_a_terminal_call() -> None:
    who = agent(tool_rules=(RequiredBeforeExitToolRule(tool_name="archival_memory_insert"),))
    said = ("send_message", '{"message": "Done."}')

    (result,) = await take([turn(answers(CITIES[0], said), who)], TableSandbox({"lookup": ok("sunny")}))

    assert (result.continues, result.reason) == (True, Reason.REQUIRED_BEFORE_EXIT)


async def test_turns_of_many_agents_share_the_sandbox_waves() -> None:
    sandbox = TableSandbox({"lookup": ok("sunny")})

    results = await take(
        [turn(answers(*CITIES, heartbeat=True), agent("agent-1")), turn(answers(CITIES[0]), agent("agent-2"))],
        sandbox,
    )

    assert sandbox.waves == [["lookup", "lookup", "lookup", "lookup"]]
    assert [len(r.messages) for r in results] == [4, 2]
