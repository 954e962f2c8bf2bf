"""Calls that wait for the client: approvals (human in the loop) and client-side tools.

A call waits when its tool has a ``requires_approval`` rule, or when it names one of the
``client_tools`` a request offered (schemas given by the client, never run on the server). When
the model makes such a call, none of its turn's calls run: the agent stops with its assistant
turn stored as an approval request (``MessageKind.APPROVAL_REQUEST``), which ends its window
until the client answers. The answer (``Answer``) gives, per waiting call, a ``Verdict``:

- ``APPROVED``: the call runs, as it would have;
- ``DENIED``: it never runs; the model gets the denial (and the reason) as the tool's error;
- ``RETURNED``: the client ran it (a client-side tool) and gives its result.

The turn's other calls (those that did not wait) run with the approved ones. Then the agent
goes on: a denial or a client's result always gets the model another step, as in Letta.

    awaiting nothing --(a turn calls a waiting tool)--> awaiting an answer
    awaiting an answer --(the answer, all waiting calls covered)--> awaiting nothing

Anything else sent to an agent that awaits an answer is refused (a conflict), and so is an
answer to an agent that awaits none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nightshift.domain.messages import Message, MessageKind, Role, ToolCall
from nightshift.domain.tool_rules import RequiresApprovalToolRule, ToolRule
from nightshift.domain.tools import Tool
from nightshift.errors import Conflict, InvalidInput


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientTool:
    """A tool the client offers for one request and runs itself: its name, description and
    parameters (a JSON object schema)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def json_schema(self) -> dict[str, Any]:
        """The schema the model is offered, in the shape of a stored tool's ``json_schema``."""
        parameters = dict(self.parameters) or {"type": "object", "properties": {}}
        return {"name": self.name, "description": self.description, "parameters": parameters}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClientTool:
        return cls(
            name=str(data["name"]),
            description=str(data.get("description") or ""),
            parameters=data.get("parameters") or {},
        )


class VerdictKind(StrEnum):
    """What the client said about one waiting call."""

    APPROVED = "approved"  # the call runs on the server
    DENIED = "denied"  # the call never runs; the model sees the denial as the tool's error
    RETURNED = "returned"  # the client ran it and gives the result (``Verdict.output``)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The client's answer for one call, by its ``tool_call_id``."""

    tool_call_id: str
    kind: VerdictKind
    reason: str | None = None  # why it was denied, if the client said
    output: str = ""  # a returned call's result
    is_error: bool = False  # a returned call failed on the client
    stdout: tuple[str, ...] = ()
    stderr: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """The client's answer to an approval request: per-call verdicts, or Letta's older form (one
    ``approve`` for every waiting call of the request ``approval_request_id``)."""

    verdicts: tuple[Verdict, ...] = ()
    approve: bool | None = None
    approval_request_id: str | None = None
    reason: str | None = None


def requires_approval(rules: Sequence[ToolRule], name: str) -> bool:
    """Whether a call of ``name`` waits for a person's approval under these rules."""
    return any(isinstance(r, RequiresApprovalToolRule) and r.tool_name == name for r in rules)


def with_default_approvals(rules: Sequence[ToolRule], tools: Sequence[Tool]) -> list[ToolRule]:
    """``rules`` with a requires_approval rule for each of ``tools`` that asks for one by default (as Letta)."""
    added = [
        RequiresApprovalToolRule(tool_name=t.name)
        for t in tools
        if t.default_requires_approval and not requires_approval(rules, t.name)
    ]
    return [*rules, *added]


def waiting_calls(
    calls: Sequence[ToolCall], rules: Sequence[ToolRule], is_client_tool: Callable[[str], bool]
) -> list[ToolCall]:
    """The calls of a turn that wait for the client (needing approval, or client-side)."""
    return [c for c in calls if requires_approval(rules, c.name) or is_client_tool(c.name)]


def pending_request(window_tail: Message | None) -> Message | None:
    """The approval request an agent awaits an answer to: the last message of its window, if it is one."""
    if (
        window_tail is not None
        and window_tail.role is Role.ASSISTANT
        and window_tail.kind is MessageKind.APPROVAL_REQUEST
    ):
        return window_tail
    return None


def denial_text(reason: str | None) -> str:
    """What the model reads as the result of a call the client denied."""
    said = f" The reason given: {reason}" if reason else ""
    return f"The user denied the request to call this tool; it did not run.{said}"


def checked_verdicts(
    answer: Answer, request: Message, waiting: Sequence[ToolCall], server_tools: Callable[[str], bool]
) -> dict[str, Verdict]:
    """The verdicts by call id, checked against the request's calls.

    Every waiting call needs a verdict; a verdict may also name another call of the turn (one
    that did not wait: denying it keeps it from running). A call of a client-side tool cannot be
    approved (the server cannot run it): the client returns its result.

    Raises:
        InvalidInput: a verdict for no call of the request, a call answered twice, a waiting
            call left unanswered, an older-form answer naming another request, or an approval of
            a client-side tool.
    """
    calls = {c.id: c for c in request.tool_calls}
    if answer.approve is not None and not answer.verdicts:
        if answer.approval_request_id is not None and answer.approval_request_id != request.id:
            raise InvalidInput(
                f"approval_request_id {answer.approval_request_id!r} is not the pending approval request "
                f"({request.id})",
                field="messages",
            )
        kind = VerdictKind.APPROVED if answer.approve else VerdictKind.DENIED
        verdicts = tuple(Verdict(tool_call_id=c.id, kind=kind, reason=answer.reason) for c in waiting)
    else:
        verdicts = answer.verdicts
    found: dict[str, Verdict] = {}
    for verdict in verdicts:
        if verdict.tool_call_id not in calls:
            raise InvalidInput(
                f"tool_call_id {verdict.tool_call_id!r} is no call of the pending approval request; its calls: "
                f"{', '.join(calls)}",
                field="messages",
            )
        if verdict.tool_call_id in found:
            raise InvalidInput(f"tool_call_id {verdict.tool_call_id!r} is answered twice", field="messages")
        call = calls[verdict.tool_call_id]
        if verdict.kind is VerdictKind.APPROVED and not server_tools(call.name):
            raise InvalidInput(
                f"{call.name!r} (call {call.id}) is a client-side tool: send its result as a tool return "
                "(type 'tool') instead of approving it",
                field="messages",
            )
        found[verdict.tool_call_id] = verdict
    missing = [c.id for c in waiting if c.id not in found]
    if missing:
        raise InvalidInput(
            f"the pending approval request waits for an answer to every call of {', '.join(missing)}; "
            "give one approval or tool return per tool_call_id",
            field="messages",
        )
    return found


def awaiting_conflict(agent_id: str, request: Message) -> Conflict:
    """The refusal of anything but an answer while the agent awaits one."""
    names = ", ".join(f"{c.name} ({c.id})" for c in request.tool_calls)
    return Conflict(
        f"agent {agent_id} is waiting for approval of its tool calls {names} (approval request {request.id}); "
        "approve or deny them (a message of type 'approval') before sending anything else"
    )


def not_awaiting_conflict(agent_id: str) -> Conflict:
    """The refusal of an answer to an agent that awaits none."""
    return Conflict(f"agent {agent_id} has no tool call awaiting approval; there is nothing to approve or deny")
