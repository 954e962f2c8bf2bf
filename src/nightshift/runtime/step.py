"""One step of many agents: apply the model's answers, run the tools, decide who continues.

Shared by batch runs (the answers come from a provider batch) and synchronous stepping (from the
normal API). Nothing here writes to the database: ``take_turns`` returns, per agent, the messages
to persist, the blocks it changed, the passages it saved and whether it continues, and the caller
writes them all in a few bulk statements. Base tools run in-process; custom tools of all agents
go to the sandbox together.

A turn may hold several tool calls: each is checked against the tool rules as the calls before it
left them, runs in order, and gets its own tool message. A failing call (unknown, not allowed by
the rules, malformed arguments, an exception, a timeout) becomes a tool message with the error,
the turn's other calls still run, and the agent gets another step to react to it -- unless the
turn ended the run: a terminal (exit_loop) call, or send_message made with other calls. Whatever
else goes wrong with one agent's turn (a bug its answer runs into) fails that agent alone: its
result says why (``failure``) and the other agents' turns go on.

A turn that calls a tool needing approval, or a client-side tool, runs none of its calls: it is
parked (``TurnReason.REQUIRES_APPROVAL``) until the client answers; the answer comes back as a
turn of its own (``Turn.verdicts``) whose calls then run, are denied or take the client's result
(``domain/approvals.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeAlias

from nightshift.domain.agents import Agent
from nightshift.domain.approvals import ClientTool, Verdict, VerdictKind, denial_text, waiting_calls
from nightshift.domain.batches import StepState
from nightshift.domain.blocks import Block
from nightshift.domain.fast_init import fast_init
from nightshift.domain.messages import SEND_MESSAGE, Message, MessageKind, Role, ToolCall
from nightshift.domain.passages import Passage
from nightshift.domain.solver import Reason, ToolRulesSolver, UnmappedToolOutput
from nightshift.domain.tools import ToolType
from nightshift.errors import ToolError
from nightshift.ids import new_id
from nightshift.providers.base import ModelResponse
from nightshift.runtime.tool_messages import failed_text, tool_message, truncated
from nightshift.tools.base import AgentContext, MemorySearch, run_base_tool
from nightshift.tools.models import sandbox_source
from nightshift.tools.results import SandboxCall
from nightshift.tools.sandbox import Sandbox

log = logging.getLogger(__name__)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """An agent, where it is in its run, and what the model answered."""

    agent: Agent
    state: StepState
    response: ModelResponse
    batch_item_id: str | None = None
    # The id the turn's assistant message gets, when it was given out before (a streamed answer).
    message_id: str | None = None
    # Set when the turn is the client's answer to a parked turn (whose assistant message is
    # stored already): the verdicts by call id; the calls without one run as usual.
    verdicts: Mapping[str, Verdict] | None = None
    # When the model read the agent's memory (its request was built): a block edited after that by
    # someone else (another agent sharing it, an API call) is one the model's rewrite did not see.
    read_at: datetime | None = None


class TurnReason(StrEnum):
    """Why the runtime itself lets a turn's agent go on, or ends its run; the tool rules' reasons
    for a call that ran are ``domain.solver.Reason`` (together: ``Why``, ``TurnResult.reason``)."""

    FINAL_TEXT = "final_text"  # ends: a text answer without a tool call
    SENT_MESSAGE = "sent_message"  # ends: send_message along with other calls (letta_v1: also alone)
    TOOL_RESULT = "tool_result"  # goes on: a letta_v1 agent called a tool and gets its result back
    TOOL_ERROR = "tool_error"  # goes on: a call failed, and the model gets a step to react
    TOOL_RULES = "tool_rules"  # ends: the rules leave no way on (``TurnResult.detail`` says why)
    MAX_STEPS = "max_steps"  # ends: the run's step limit was reached
    ERROR = "error"  # ends: the turn could not be taken at all (``TurnResult.failure`` says why)
    REQUIRES_APPROVAL = "requires_approval"  # ends: a call waits for the client (``domain/approvals.py``)
    CLIENT_ANSWERED = "client_answered"  # goes on: the client denied a call or returned a result


# Why a turn goes on or ends: the rules' decision, or the runtime's own reason.
Why: TypeAlias = Reason | TurnReason


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    """What one turn produced. ``state`` is the next step's state when ``continues``.

    ``failure`` says why the turn could not be taken at all (then nothing else is set).
    ``request_tokens`` is the size of the request answered, as the provider counted it (None
    when it did not say). ``heartbeat``: whether the next step, when it ``continues``, starts with
    a heartbeat (the automatic user turn): always in the memgpt loops; a letta_v1 agent goes on
    from its tool results alone, and gets one only after a turn without a call (a rule held it).
    """

    agent_id: str
    messages: tuple[Message, ...]
    continues: bool
    reason: Why
    state: StepState
    detail: str | None = None
    changed_blocks: tuple[Block, ...] = ()
    passages: tuple[Passage, ...] = ()
    tool_error: str | None = None
    failure: str | None = None
    request_tokens: int | None = None
    heartbeat: bool = True


@dataclass(slots=True)
class _Call:
    """One tool call of a turn and what became of it."""

    call: ToolCall
    output: str | None = None
    error: str | None = None
    refused: bool = False  # the call never ran: unknown tool, not allowed, malformed arguments
    stdout: str = ""  # what a sandboxed tool printed
    stderr: str = ""
    context: AgentContext | None = None  # a base tool's working copy of the agent's memory
    sandbox_index: int | None = None


@dataclass(slots=True, eq=False)
class _Pending:
    """One agent's turn while its calls run: ``position`` is the next call to check."""

    turn: Turn
    calls: list[_Call]
    solver: ToolRulesSolver  # the rules with the calls checked so far registered
    position: int = 0

    @property
    def done(self) -> bool:
        return self.position >= len(self.calls)


def _tool_message(turn: Turn, entry: _Call, output: str, *, is_error: bool, now: datetime) -> Message:
    return tool_message(
        turn.agent,
        turn.batch_item_id,
        entry.call,
        output,
        is_error=is_error,
        now=now,
        stdout=entry.stdout,
        stderr=entry.stderr,
    )


def _assistant_message(turn: Turn, now: datetime) -> Message:
    response = turn.response
    return Message(
        id=turn.message_id or new_id("message"),
        organization_id=turn.agent.organization_id,
        agent_id=turn.agent.id,
        role=Role.ASSISTANT,
        text=response.text or "",
        reasoning=response.reasoning,
        tool_calls=response.tool_calls,
        batch_item_id=turn.batch_item_id,
        created_at=now,
    )


def _check_call(item: _Pending, call: ToolCall) -> tuple[dict[str, Any] | None, str | None]:
    """The call's arguments, or the error the model should see instead."""
    agent = item.turn.agent
    tool = agent.tool(call.name)
    if tool is None:
        names = ", ".join(t.name for t in agent.tools)
        return None, f"unknown tool {call.name!r}; the tools you have are: {names}"
    if item.position == 0:
        allowed = item.turn.state.allowed_tools
    else:
        # A later call of the turn: the rules as the calls before it left them.
        try:
            allowed = tuple(item.solver.allowed_tools([t.name for t in agent.tools]))
        except UnmappedToolOutput as exc:
            return None, f"tool {call.name!r} was not run: {exc.message}"
    if allowed and call.name not in allowed:
        where = "at this step" if item.position == 0 else "after the calls before it in this turn"
        return None, f"tool {call.name!r} is not allowed {where} by the tool rules; allowed: {', '.join(allowed)}"
    try:
        return call.parsed_arguments(), None
    except ValueError as exc:
        return None, f"the arguments of {call.name!r} are not a valid JSON object ({exc}): {call.arguments[:200]}"


async def take_turns(
    turns: Sequence[Turn], *, search: MemorySearch, sandbox: Sandbox, now: datetime
) -> list[TurnResult]:
    """Apply each agent's answer; see the module docstring.

    A turn's calls are checked and run in order. Base tools run at once; custom tools go to the
    sandbox in waves, every agent's together: an agent's consecutive custom calls share a wave
    (they run side by side), and a call after them waits for the next wave, so each call sees
    the rules (and the memory) as the calls before it left them.
    """
    parked = {id(turn): _parked(turn, now) for turn in turns if _waits(turn)}
    pending = [
        _Pending(
            turn=turn,
            calls=[_Call(call=call) for call in turn.response.tool_calls],
            solver=ToolRulesSolver(turn.agent.tool_rules, turn.state.solver),
        )
        for turn in turns
        if id(turn) not in parked
    ]
    # Blocks as this step's memory edits left them: agents that share a block each edit the value
    # the one before left, so no edit is lost.
    edited: dict[str, Block] = {}
    waiting = [item for item in pending if not item.done]
    while waiting:
        sandbox_calls: list[SandboxCall] = []
        queued: list[tuple[_Pending, _Call]] = []
        for item in waiting:
            await _advance(item, sandbox_calls, queued, edited, search, now)
        if sandbox_calls:
            results = await sandbox.run_many(sandbox_calls)
            for _, entry in queued:
                assert entry.sandbox_index is not None
                result = results[entry.sandbox_index]
                entry.stdout, entry.stderr = result.stdout, result.stderr
                if result.ok:
                    value = result.value
                    entry.output = value if isinstance(value, str) else json.dumps(value, default=str)
                else:
                    entry.error = failed_text(entry.call.name, result.error or "the tool failed")
            for item in dict.fromkeys(item for item, _ in queued):
                item.solver = _replayed(item)
        waiting = [item for item in waiting if not item.done]
    finished = {id(item.turn): _finish_alone(item, now) for item in pending}
    return [parked.get(id(turn)) or finished[id(turn)] for turn in turns]


def _waits(turn: Turn) -> bool:
    """Whether the turn's calls wait for the client (a new answer only: an answer's calls run)."""
    if turn.verdicts is not None:
        return False
    # A client tool named as one of the agent's own is not offered (``context.build_requests``): the agent's runs.
    client = {t.name for t in turn.state.client_tools if turn.agent.tool(t.name) is None}
    return bool(waiting_calls(turn.response.tool_calls, turn.agent.tool_rules, client.__contains__))


def _parked(turn: Turn, now: datetime) -> TurnResult:
    """The turn stored as an approval request, none of its calls run; the agent stops until the client answers."""
    message = replace(_assistant_message(turn, now), kind=MessageKind.APPROVAL_REQUEST)
    return TurnResult(
        agent_id=turn.agent.id,
        messages=(message,),
        continues=False,
        reason=TurnReason.REQUIRES_APPROVAL,
        state=turn.state,
        request_tokens=turn.response.usage.prompt_tokens or None,
    )


def _answered(entry: _Call, verdict: Verdict) -> None:
    """Give a call the client's answer instead of running it: a denial or the client's result."""
    entry.refused = True  # it did not run here: the rules stay as they were
    if verdict.kind is VerdictKind.DENIED:
        entry.error = failed_text(entry.call.name, denial_text(verdict.reason))
    elif verdict.is_error:
        entry.error = verdict.output
    else:
        entry.output = verdict.output
    entry.stdout, entry.stderr = "\n".join(verdict.stdout), "\n".join(verdict.stderr)


async def _advance(
    item: _Pending,
    sandbox_calls: list[SandboxCall],
    queued: list[tuple[_Pending, _Call]],
    edited: dict[str, Block],
    search: MemorySearch,
    now: datetime,
) -> None:
    """Check and run the agent's next calls: base tools until a custom one, custom ones until another kind."""
    turn = item.turn
    in_sandbox = False
    while not item.done:
        entry = item.calls[item.position]
        call = entry.call
        verdict = turn.verdicts.get(call.id) if turn.verdicts is not None else None
        if verdict is not None and verdict.kind is not VerdictKind.APPROVED:
            _answered(entry, verdict)
            item.position += 1
            continue
        tool = turn.agent.tool(call.name)
        if in_sandbox and (tool is None or tool.tool_type is not ToolType.CUSTOM):
            return  # it runs after the custom calls before it, in the next wave
        arguments, error = _check_call(item, call)
        item.position += 1
        if error is not None or arguments is None or tool is None:
            entry.error, entry.refused = error, True
            continue
        if tool.tool_type is ToolType.CUSTOM:
            entry.sandbox_index = len(sandbox_calls)
            sandbox_calls.append(
                SandboxCall(
                    organization_id=turn.agent.organization_id,
                    source_code=sandbox_source(tool),
                    function_name=tool.name,
                    arguments=arguments,
                    env=turn.agent.secrets,
                )
            )
            queued.append((item, entry))
            # Registered without its output for now (the wave's end replays it with the output).
            item.solver = item.solver.register(call.name, None)
            in_sandbox = True
            if item.solver.needs_output(call.name):
                return  # what may follow depends on the output
            continue
        # Keyed by the label as this step's edits left it (the memory tool may rename a block).
        current = (edited.get(b.id, b) for b in turn.agent.blocks)
        entry.context = AgentContext(
            agent_id=turn.agent.id, blocks={b.label: b for b in current}, search=search, now=now, read_at=turn.read_at
        )
        try:
            entry.output = await run_base_tool(call.name, entry.context, arguments)
        except ToolError as exc:
            entry.error = failed_text(call.name, exc.message)
        except Exception as exc:  # a bug this call runs into: the model sees it as the tool's failure
            log.exception("base tool %s failed for agent %s", call.name, turn.agent.id)
            entry.error = failed_text(call.name, f"{type(exc).__name__}: {exc}")
        for label in entry.context.changed_labels:
            edited[entry.context.blocks[label].id] = entry.context.blocks[label]
        item.solver = item.solver.register(call.name, entry.output if entry.error is None else entry.error)


def _replayed(item: _Pending) -> ToolRulesSolver:
    """The rules with every checked call that ran registered, in order, with its output or error.

    A call that ran and failed counts (max_count_per_step, child rules); one that never ran leaves
    the rules as they were, so the model gets the same choice again.
    """
    solver = ToolRulesSolver(item.turn.agent.tool_rules, item.turn.state.solver)
    for entry in item.calls[: item.position]:
        if not entry.refused:
            solver = solver.register(entry.call.name, entry.output if entry.error is None else entry.error)
    return solver


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
    turn = item.turn
    agent, state = turn.agent, turn.state
    # An answer's assistant message was stored when its turn was parked.
    messages = [_assistant_message(turn, now)] if turn.verdicts is None else []
    available = [t.name for t in agent.tools]
    solver = _replayed(item)
    changed: dict[str, Block] = {}
    new_passages: list[str] = []
    for entry in item.calls:
        if entry.error is not None:
            messages.append(_tool_message(turn, entry, entry.error, is_error=True, now=now))
            continue
        output = entry.output or ""
        tool = agent.tool(entry.call.name)
        output = truncated(output, tool.return_char_limit if tool else len(output))
        messages.append(_tool_message(turn, entry, output, is_error=False, now=now))
        if entry.context is not None:
            blocks = entry.context.blocks
            changed.update({blocks[label].id: blocks[label] for label in sorted(entry.context.changed_labels)})
            new_passages.extend(entry.context.new_passages)
    continues, reason = _decide(item, solver, available)
    if not continues and turn.verdicts and any(v.kind is not VerdictKind.APPROVED for v in turn.verdicts.values()):
        # A denial or a client's result is news to the model: it gets a step to react, as in Letta.
        continues, reason = True, TurnReason.CLIENT_ANSWERED
    detail: str | None = None
    next_state = StepState(
        step_number=state.step_number + 1,
        max_steps=state.max_steps,
        solver=solver.state,
        retries=state.retries,
        client_tools=state.client_tools,
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
                client_tools=next_state.client_tools,
            )
        except UnmappedToolOutput as exc:
            continues, reason, detail = False, TurnReason.TOOL_RULES, exc.message
    errors = [entry.error for entry in item.calls if entry.error is not None]
    return TurnResult(
        agent_id=agent.id,
        messages=tuple(messages),
        continues=continues,
        reason=reason,
        detail=detail,
        state=next_state,
        changed_blocks=tuple(changed.values()),
        passages=tuple(
            Passage(
                id=new_id("passage"),
                organization_id=agent.organization_id,
                agent_id=agent.id,
                text=text,
                created_at=now,
            )
            for text in new_passages
        ),
        tool_error="; ".join(errors) if errors else None,
        request_tokens=turn.response.usage.prompt_tokens or None,
        heartbeat=agent.agent_type.heartbeats or not item.calls,
    )


def _decide(item: _Pending, solver: ToolRulesSolver, available: list[str]) -> tuple[bool, Why]:
    """Whether the agent goes on after its turn, and why (see ``Why``)."""
    calls = item.calls
    if not calls:
        # A text answer without a tool call is the agent's final word for this run.
        decision = solver.decide_turn((), request_heartbeat=False, available=available)
        return decision.continues, decision.reason if decision.continues else TurnReason.FINAL_TEXT
    ran = [entry.call.name for entry in calls if entry.error is None]
    # A terminal call ends the run once the turn's other calls ran; so does send_message made
    # together with other calls: the agent has answered, another round would only say so again.
    if any(solver.is_terminal(name) for name in ran):
        ending: Why | None = Reason.EXIT_LOOP
    elif len(calls) > 1 and SEND_MESSAGE in ran:
        ending = TurnReason.SENT_MESSAGE
    else:
        ending = None
    if ending is not None:
        if solver.pending_required(available):
            return True, Reason.REQUIRED_BEFORE_EXIT
        return False, ending
    if len(ran) < len(calls):
        return True, TurnReason.TOOL_ERROR
    if not item.turn.agent.agent_type.heartbeats:
        return _decide_v1(solver, ran, available)
    decision = solver.decide_turn(ran, request_heartbeat=item.turn.response.request_heartbeat, available=available)
    return decision.continues, decision.reason


def _decide_v1(solver: ToolRulesSolver, ran: list[str], available: list[str]) -> tuple[bool, Why]:
    """The letta_v1 loop after a turn whose calls all ran: the model gets their results back
    (there is no heartbeat to ask for), unless the turn was send_message alone, its answer."""
    decision = solver.decide_turn(ran, request_heartbeat=ran != [SEND_MESSAGE], available=available)
    if decision.reason is Reason.HEARTBEAT:
        return True, TurnReason.TOOL_RESULT
    if decision.reason is Reason.NO_HEARTBEAT:
        return False, TurnReason.SENT_MESSAGE
    return decision.continues, decision.reason


def first_state(agent: Agent, max_steps: int, *, client_tools: tuple[ClientTool, ...] = ()) -> StepState:
    """The state of an agent's first step of a run: the tools its rules allow first, and the
    client-side tools the run offers (``client_tools``)."""
    solver = ToolRulesSolver(agent.tool_rules)
    return StepState(
        step_number=0,
        max_steps=max_steps,
        allowed_tools=tuple(solver.allowed_tools([t.name for t in agent.tools])),
        client_tools=client_tools,
    )
