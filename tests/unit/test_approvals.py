"""Approvals and client-side tools with plain values: the rules of ``domain/approvals.py`` and the
parked and answered turns of ``runtime.step.take_turns`` (no database, no provider)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from nightshift.batch.decisions import final_status, next_step
from nightshift.domain.approvals import (
    Answer,
    ClientTool,
    Verdict,
    VerdictKind,
    checked_verdicts,
    pending_request,
    waiting_calls,
)
from nightshift.domain.batch_progress import BatchRunProgress
from nightshift.domain.batches import (
    BatchItem,
    BatchRunRequest,
    BatchRunStatus,
    ItemOutcome,
    RequestStatus,
    StepState,
    StepStatus,
)
from nightshift.domain.messages import Message, MessageKind, Role, ToolCall, UserInput
from nightshift.domain.tool_rules import RequiresApprovalToolRule, parse_tool_rules
from nightshift.errors import InvalidInput
from nightshift.providers.base import ModelResponse
from nightshift.runtime.step import Turn, TurnReason, TurnResult, take_turns
from unit.test_step import NOW, NoMemory, TableSandbox, agent, ok, tool

GATED = (RequiresApprovalToolRule(tool_name="lookup"),)
CLIPBOARD = ClientTool(name="read_clipboard", description="Read the clipboard.")


def calls(*names: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(id=f"call_{i}", name=name, arguments='{"a": 1}') for i, name in enumerate(names))


def request_message(tool_calls: tuple[ToolCall, ...]) -> Message:
    return Message(
        id="message-req",
        organization_id="org-1",
        agent_id="agent-1",
        role=Role.ASSISTANT,
        text="",
        created_at=NOW,
        tool_calls=tool_calls,
        kind=MessageKind.APPROVAL_REQUEST,
    )


def test_the_rule_parses_in_letta_shape() -> None:
    (rule,) = parse_tool_rules([{"type": "requires_approval", "tool_name": "lookup"}])
    assert rule == RequiresApprovalToolRule(tool_name="lookup")


def test_the_waiting_calls_are_the_gated_and_the_client_side_ones() -> None:
    made = calls("send_message", "lookup", "read_clipboard")
    waiting = waiting_calls(made, GATED, {"read_clipboard"}.__contains__)
    assert [c.name for c in waiting] == ["lookup", "read_clipboard"]
    assert waiting_calls(made, (), lambda _: False) == []


def test_only_an_approval_request_at_the_end_of_the_window_is_pending() -> None:
    request = request_message(calls("lookup"))
    assert pending_request(request) is request
    assert pending_request(replace(request, kind=MessageKind.PLAIN)) is None
    assert pending_request(replace(request, role=Role.TOOL)) is None
    assert pending_request(None) is None


def on_server(name: str) -> bool:
    return name != "read_clipboard"


def test_verdicts_must_cover_every_waiting_call_and_name_only_the_requests_calls() -> None:
    made = calls("send_message", "lookup", "read_clipboard")
    request = request_message(made)
    waiting = list(made[1:])
    full = Answer(
        verdicts=(
            Verdict(tool_call_id="call_1", kind=VerdictKind.DENIED, reason="no"),
            Verdict(tool_call_id="call_2", kind=VerdictKind.RETURNED, output="milk"),
        )
    )
    assert set(checked_verdicts(full, request, waiting, on_server)) == {"call_1", "call_2"}
    problems = {
        "no call": Answer(verdicts=(*full.verdicts, Verdict(tool_call_id="call_9", kind=VerdictKind.APPROVED))),
        "twice": Answer(verdicts=(*full.verdicts, full.verdicts[0])),
        "call_2": Answer(verdicts=full.verdicts[:1]),
        "client-side tool": Answer(
            verdicts=(full.verdicts[0], Verdict(tool_call_id="call_2", kind=VerdictKind.APPROVED))
        ),
        "message-other": Answer(approve=True, approval_request_id="message-other"),
    }
    for says, answer in problems.items():
        with pytest.raises(InvalidInput, match=says):
            checked_verdicts(answer, request, waiting, on_server)


def test_the_older_form_answers_every_waiting_call_alike() -> None:
    made = calls("send_message", "lookup")
    request = request_message(made)
    verdicts = checked_verdicts(
        Answer(approve=False, approval_request_id=request.id, reason="later"), request, [made[1]], on_server
    )
    assert verdicts == {"call_1": Verdict(tool_call_id="call_1", kind=VerdictKind.DENIED, reason="later")}


async def test_a_gated_call_parks_the_turn_and_runs_nothing() -> None:
    gated = agent(tool_rules=GATED)
    sandbox = TableSandbox({"lookup": ok("found")})
    response = ModelResponse(tool_calls=calls("send_message", "lookup"), reasoning="hm")
    (result,) = await take_turns(
        [Turn(agent=gated, state=StepState(), response=response)], search=NoMemory(), sandbox=sandbox, now=NOW
    )
    assert sandbox.calls == []
    assert (result.continues, result.reason) == (False, TurnReason.REQUIRES_APPROVAL)
    (message,) = result.messages
    assert (message.role, message.kind, message.tool_calls) == (
        Role.ASSISTANT,
        MessageKind.APPROVAL_REQUEST,
        response.tool_calls,
    )
    assert result.state == StepState()


async def test_a_client_side_tool_parks_the_turn_and_other_agents_go_on() -> None:
    state = StepState(client_tools=(CLIPBOARD,))
    clienty = Turn(agent=agent(), state=state, response=ModelResponse(tool_calls=calls("read_clipboard")))
    other = Turn(agent=agent("agent-2"), state=StepState(), response=ModelResponse(tool_calls=calls("send_message")))
    parked, done = await take_turns([clienty, other], search=NoMemory(), sandbox=TableSandbox({}), now=NOW)
    assert parked.reason is TurnReason.REQUIRES_APPROVAL
    assert [m.role for m in done.messages] == [Role.ASSISTANT, Role.TOOL]


async def test_an_answer_runs_the_approved_and_unwaited_calls_and_returns_the_rest() -> None:
    gated = agent(tools=(*agent().tools, tool("other")), tool_rules=GATED)
    sandbox = TableSandbox({"lookup": ok("found"), "other": ok("done")})
    made = calls("lookup", "other", "read_clipboard", "lookup")
    verdicts = {
        "call_0": Verdict(tool_call_id="call_0", kind=VerdictKind.APPROVED),
        "call_2": Verdict(tool_call_id="call_2", kind=VerdictKind.RETURNED, output="milk", stdout=("printed",)),
        "call_3": Verdict(tool_call_id="call_3", kind=VerdictKind.DENIED, reason="too dear"),
    }
    answered = Turn(
        agent=gated,
        state=StepState(client_tools=(CLIPBOARD,)),
        response=ModelResponse(tool_calls=made, request_heartbeat=True),
        verdicts=verdicts,
    )
    (result,) = await take_turns([answered], search=NoMemory(), sandbox=sandbox, now=NOW)
    assert [c.function_name for c in sandbox.calls] == ["lookup", "other"]
    # No assistant message: it was stored when the turn was parked. One result per call, in order.
    assert [(m.role, m.tool_call_id, m.is_error) for m in result.messages] == [
        (Role.TOOL, "call_0", False),
        (Role.TOOL, "call_1", False),
        (Role.TOOL, "call_2", False),
        (Role.TOOL, "call_3", True),
    ]
    texts = [json.loads(m.text)["message"] for m in result.messages]
    assert texts[:3] == ["found", "done", "milk"]
    assert "too dear" in texts[3]
    assert result.messages[2].stdout == ("printed",)
    assert result.continues
    assert result.state.client_tools == (CLIPBOARD,)


async def test_a_returned_result_alone_gets_the_model_another_step() -> None:
    made = calls("read_clipboard")
    verdicts = {"call_0": Verdict(tool_call_id="call_0", kind=VerdictKind.RETURNED, output="x")}
    answered = Turn(agent=agent(), state=StepState(), response=ModelResponse(tool_calls=made), verdicts=verdicts)
    (result,) = await take_turns([answered], search=NoMemory(), sandbox=TableSandbox({}), now=NOW)
    assert (result.continues, result.reason) == (True, TurnReason.CLIENT_ANSWERED)


def test_a_parked_agent_leaves_its_run_which_still_completes() -> None:
    item = BatchItem(
        id="item-1",
        organization_id="org-1",
        provider_batch_id="pb-1",
        batch_run_id="batch-1",
        agent_id="agent-1",
        step_status=StepStatus.PAUSED,
        request_status=RequestStatus.COMPLETED,
        step_state=StepState(),
        created_at=NOW,
        updated_at=NOW,
    )
    parked = TurnResult(
        agent_id="agent-1", messages=(), continues=False, reason=TurnReason.REQUIRES_APPROVAL, state=StepState()
    )
    completions, entries = next_step([item], {"agent-1": parked}, {"agent-1": agent()}, run_open=True)
    assert [c.outcome for c in completions] == [ItemOutcome.NEEDS_APPROVAL]
    assert entries == []
    progress = BatchRunProgress(outcomes={ItemOutcome.NEEDS_APPROVAL: 1})
    assert final_status(progress) is BatchRunStatus.COMPLETED


def test_states_and_queued_requests_keep_their_client_tools() -> None:
    state = StepState(client_tools=(CLIPBOARD,))
    assert StepState.from_json(state.to_json()) == state
    assert "client_tools" not in StepState().to_json()  # a state without them reads as before
    request = BatchRunRequest(agent_id="agent-1", messages=(UserInput(text="hi"),), client_tools=(CLIPBOARD,))
    assert BatchRunRequest.from_json(request.to_json()) == request
    answered = BatchRunRequest(agent_id="agent-1", messages=(), answered=True)
    assert BatchRunRequest.from_json(answered.to_json()) == answered
