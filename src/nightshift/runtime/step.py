"""One step of many agents: apply the model's answers, run the tools, decide who continues.

Shared by batch runs (the answers come from a provider batch) and synchronous stepping (from the
normal API). Nothing here writes to the database: ``take_turns`` returns, per agent, the messages
to persist, the blocks it changed, the passages it saved and whether it continues, and the caller
writes them all in a few bulk statements. Base tools run in-process; custom tools of all agents
go to the sandbox together.

A failing tool (unknown, not allowed by the rules, malformed arguments, an exception, a timeout)
becomes a tool message with the error, and the agent gets another step to react to it. Whatever
else goes wrong with one agent's turn (a bug its answer runs into) fails that agent alone: its
result says why (``failure``) and the other agents' turns go on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from nightshift.domain.agents import Agent
from nightshift.domain.batches import StepState
from nightshift.domain.blocks import Block
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.domain.passages import Passage
from nightshift.domain.solver import ToolRulesSolver, UnmappedToolOutput
from nightshift.domain.tools import ToolType
from nightshift.errors import ToolError
from nightshift.ids import new_id
from nightshift.providers.base import ModelResponse
from nightshift.tools.base import AgentContext, MemorySearch, run_base_tool
from nightshift.tools.sandbox import Sandbox, SandboxCall

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """An agent, where it is in its run, and what the model answered."""

    agent: Agent
    state: StepState
    response: ModelResponse
    batch_item_id: str | None = None


class TurnReason(StrEnum):
    """Why a turn lets its agent go on, or ends its run (``TurnResult.reason``)."""

    # The tool rules' reasons for a call that ran (``domain.solver.Reason``):
    EXIT_LOOP = "exit_loop"  # ends: the tool has an exit_loop rule
    CONTINUE_LOOP = "continue_loop"  # goes on: the tool has a continue_loop rule
    CHILD_RULE = "child_rule"  # goes on: the tool has a child or conditional rule
    HEARTBEAT = "heartbeat"  # goes on: the model asked to be called again
    NO_HEARTBEAT = "no_heartbeat"  # ends: the model did not ask to be called again
    REQUIRED_BEFORE_EXIT = "required_before_exit"  # goes on: a required tool is still uncalled
    # The runtime's own:
    FINAL_TEXT = "final_text"  # ends: a text answer without a tool call
    TOOL_ERROR = "tool_error"  # goes on: the call failed, and the model gets a step to react
    TOOL_RULES = "tool_rules"  # ends: the rules leave no way on (``TurnResult.detail`` says why)
    MAX_STEPS = "max_steps"  # ends: the run's step limit was reached
    ERROR = "error"  # ends: the turn could not be taken at all (``TurnResult.failure`` says why)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    """What one turn produced. ``state`` is the next step's state when ``continues``.

    ``failure`` says why the turn could not be taken at all (then nothing else is set).
    """

    agent_id: str
    messages: tuple[Message, ...]
    continues: bool
    reason: TurnReason
    state: StepState
    detail: str | None = None
    changed_blocks: tuple[Block, ...] = ()
    passages: tuple[Passage, ...] = ()
    tool_error: str | None = None
    failure: str | None = None


@dataclass(slots=True)
class _Pending:
    turn: Turn
    call: ToolCall | None
    output: str | None = None
    error: str | None = None
    refused: bool = False  # the call never ran: unknown tool, not allowed, malformed arguments
    context: AgentContext | None = None
    sandbox_index: int | None = None


def _tool_message(turn: Turn, call: ToolCall, output: str, *, is_error: bool, now: datetime) -> Message:
    body = {"status": "Failed" if is_error else "OK", "message": output, "time": now.isoformat()}
    return Message(
        id=new_id("message"),
        organization_id=turn.agent.organization_id,
        agent_id=turn.agent.id,
        role=Role.TOOL,
        text=json.dumps(body),
        tool_call_id=call.id,
        name=call.name,
        is_error=is_error,
        batch_item_id=turn.batch_item_id,
        created_at=now,
    )


def _assistant_message(turn: Turn, now: datetime) -> Message:
    response = turn.response
    return Message(
        id=new_id("message"),
        organization_id=turn.agent.organization_id,
        agent_id=turn.agent.id,
        role=Role.ASSISTANT,
        text=response.text or "",
        reasoning=response.reasoning,
        tool_calls=(response.tool_call,) if response.tool_call else (),
        batch_item_id=turn.batch_item_id,
        created_at=now,
    )


def _check_call(turn: Turn, call: ToolCall) -> tuple[dict[str, Any] | None, str | None]:
    """The call's arguments, or the error the model should see instead."""
    agent = turn.agent
    tool = agent.tool(call.name)
    if tool is None:
        names = ", ".join(t.name for t in agent.tools)
        return None, f"unknown tool {call.name!r}; the tools you have are: {names}"
    allowed = turn.state.allowed_tools
    if allowed and call.name not in allowed:
        return None, f"tool {call.name!r} is not allowed at this step by the tool rules; allowed: {', '.join(allowed)}"
    try:
        return call.parsed_arguments(), None
    except ValueError as exc:
        return None, f"the arguments of {call.name!r} are not a valid JSON object ({exc}): {call.arguments[:200]}"


async def take_turns(
    turns: Sequence[Turn], *, search: MemorySearch, sandbox: Sandbox, now: datetime
) -> list[TurnResult]:
    """Apply each agent's answer; see the module docstring."""
    pending: list[_Pending] = []
    sandbox_calls: list[SandboxCall] = []
    # Blocks as this step's memory edits left them: agents that share a block each edit the value
    # the one before left, so no edit is lost.
    edited: dict[str, Block] = {}
    for turn in turns:
        call = turn.response.tool_call
        item = _Pending(turn=turn, call=call)
        pending.append(item)
        if call is None:
            continue
        arguments, error = _check_call(turn, call)
        if error is not None or arguments is None:
            item.error, item.refused = error, True
            continue
        tool = turn.agent.tool(call.name)
        assert tool is not None
        if tool.tool_type is ToolType.CUSTOM:
            item.sandbox_index = len(sandbox_calls)
            sandbox_calls.append(
                SandboxCall(
                    organization_id=turn.agent.organization_id,
                    source_code=tool.source_code or "",
                    function_name=tool.name,
                    arguments=arguments,
                    env=turn.agent.secrets,
                )
            )
            continue
        item.context = AgentContext(
            agent_id=turn.agent.id, blocks={b.label: edited.get(b.id, b) for b in turn.agent.blocks}, search=search
        )
        try:
            item.output = await run_base_tool(call.name, item.context, arguments)
        except ToolError as exc:
            item.error = exc.message
        except Exception as exc:  # a bug this call runs into: the model sees it as the tool's failure
            log.exception("base tool %s failed for agent %s", call.name, turn.agent.id)
            item.error = f"the tool failed: {type(exc).__name__}: {exc}"
        for label in item.context.changed_labels:
            edited[item.context.blocks[label].id] = item.context.blocks[label]

    results = await sandbox.run_many(sandbox_calls) if sandbox_calls else []
    for item in pending:
        if item.sandbox_index is None:
            continue
        result = results[item.sandbox_index]
        if result.ok:
            value = result.value
            item.output = value if isinstance(value, str) else json.dumps(value, default=str)
        else:
            item.error = result.error or "the tool failed"
    return [_finish_alone(item, now) for item in pending]


def _finish_alone(item: _Pending, now: datetime) -> TurnResult:
    try:
        return _finish(item, now)
    except Exception as exc:
        log.exception("the turn of agent %s failed", item.turn.agent.id)
        return TurnResult(
            agent_id=item.turn.agent.id,
            messages=(),
            continues=False,
            reason=TurnReason.ERROR,
            state=item.turn.state,
            failure=f"the agent's turn could not be applied: {type(exc).__name__}: {exc}",
        )


def _finish(item: _Pending, now: datetime) -> TurnResult:
    turn, call = item.turn, item.call
    agent, state = turn.agent, turn.state
    messages = [_assistant_message(turn, now)]
    available = [t.name for t in agent.tools]
    solver = ToolRulesSolver(agent.tool_rules, state.solver)
    changed: tuple[Block, ...] = ()
    detail: str | None = None
    passages: tuple[Passage, ...] = ()
    if call is None:
        # A text answer without a tool call is the agent's final word for this run.
        decision = solver.decide(None, request_heartbeat=False, available=available)
        continues = decision.continues
        reason = TurnReason(decision.reason) if continues else TurnReason.FINAL_TEXT
    elif item.error is not None:
        messages.append(_tool_message(turn, call, item.error, is_error=True, now=now))
        if not item.refused:
            # A call that ran and failed counts (max_count_per_step, child rules); one that never
            # ran leaves the rules as they were, so the model gets the same choice again.
            solver = solver.register(call.name, item.error)
        continues, reason = True, TurnReason.TOOL_ERROR
    else:
        output = item.output or ""
        tool = agent.tool(call.name)
        limit = tool.return_char_limit if tool else len(output)
        if len(output) > limit:
            output = f"{output[:limit]}... [truncated: the tool returned {len(output)} characters, limit {limit}]"
        messages.append(_tool_message(turn, call, output, is_error=False, now=now))
        solver = solver.register(call.name, output)
        decision = solver.decide(call.name, request_heartbeat=turn.response.request_heartbeat, available=available)
        continues, reason = decision.continues, TurnReason(decision.reason)
        if item.context is not None:
            changed = tuple(item.context.blocks[label] for label in sorted(item.context.changed_labels))
            passages = tuple(
                Passage(
                    id=new_id("passage"),
                    organization_id=agent.organization_id,
                    agent_id=agent.id,
                    text=text,
                    created_at=now,
                )
                for text in item.context.new_passages
            )
    next_state = StepState(
        step_number=state.step_number + 1,
        max_steps=state.max_steps,
        solver=solver.state,
        retries=state.retries,
    )
    if continues and next_state.step_number >= state.max_steps:
        continues, reason = False, TurnReason.MAX_STEPS
    if continues:
        try:
            next_state = StepState(
                step_number=next_state.step_number,
                max_steps=next_state.max_steps,
                solver=next_state.solver,
                allowed_tools=tuple(solver.allowed_tools(available)),
                retries=next_state.retries,
            )
        except UnmappedToolOutput as exc:
            continues, reason, detail = False, TurnReason.TOOL_RULES, exc.message
    return TurnResult(
        agent_id=agent.id,
        messages=tuple(messages),
        continues=continues,
        reason=reason,
        detail=detail,
        state=next_state,
        changed_blocks=changed,
        passages=passages,
        tool_error=item.error,
    )


def first_state(agent: Agent, max_steps: int) -> StepState:
    """The state of an agent's first step of a run: the tools its rules allow first."""
    solver = ToolRulesSolver(agent.tool_rules)
    return StepState(
        step_number=0, max_steps=max_steps, allowed_tools=tuple(solver.allowed_tools([t.name for t in agent.tools]))
    )
