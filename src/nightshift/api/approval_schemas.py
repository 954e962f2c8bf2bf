"""Bodies of approvals and client-side tools, in letta-client 1.12.1's shapes.

An approval message (``type: "approval"``) answers the approval request an agent awaits:
``approvals`` holds one approval return (``type: "approval"``: ``approve``, ``reason``) or tool
return (``type: "tool"``: a client-side tool's result) per call, or Letta's older form gives one
``approve`` (and ``reason``) for the request ``approval_request_id``. A tool-return message
(``type: "tool_return"``, ``tool_returns``) is the same as an approval made of tool returns.
``client_tools`` are the schemas of tools the client runs itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Discriminator, Field, model_validator

from nightshift.api.input import variant
from nightshift.domain.approvals import Answer, ClientTool, Verdict, VerdictKind
from nightshift.domain.limits import MAX_LIST_ITEMS
from nightshift.domain.tools import schema_problem
from nightshift.errors import InvalidInput


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ReturnedText(_Part):
    """A text part of a tool return."""

    type: Literal["text"] = "text"
    text: str


class ApprovalReturnBody(_Part):
    """Letta's ApprovalReturn: approve or deny one call."""

    type: Literal["approval"] = "approval"
    tool_call_id: str = Field(min_length=1, max_length=255)
    approve: bool
    reason: str | None = None

    def verdict(self) -> Verdict:
        kind = VerdictKind.APPROVED if self.approve else VerdictKind.DENIED
        return Verdict(tool_call_id=self.tool_call_id, kind=kind, reason=self.reason)


class ToolReturnBody(_Part):
    """Letta's ToolReturn: what a client-side tool returned (its text, or text parts)."""

    type: Literal["tool"] = "tool"
    tool_call_id: str = Field(min_length=1, max_length=255)
    tool_return: str | list[ReturnedText]
    status: Literal["success", "error"]
    stdout: list[str] | None = None
    stderr: list[str] | None = None

    def verdict(self) -> Verdict:
        text = self.tool_return if isinstance(self.tool_return, str) else "\n".join(p.text for p in self.tool_return)
        return Verdict(
            tool_call_id=self.tool_call_id,
            kind=VerdictKind.RETURNED,
            output=text,
            is_error=self.status == "error",
            stdout=tuple(self.stdout or ()),
            stderr=tuple(self.stderr or ()),
        )


def _part_type(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "<tool>" if kind == "tool" else "<approval>"


ApprovalPart = Annotated[
    Annotated[ApprovalReturnBody, variant("approval")] | Annotated[ToolReturnBody, variant("tool")],
    Discriminator(_part_type),
]


class ApprovalBody(_Part):
    """Letta's ApprovalCreate: the answer to the approval request the agent awaits."""

    type: Literal["approval"]
    approvals: list[ApprovalPart] | None = Field(default=None, max_length=MAX_LIST_ITEMS)
    approve: bool | None = None
    approval_request_id: str | None = Field(default=None, max_length=255)
    reason: str | None = None
    otid: str | None = Field(default=None, max_length=255)

    @model_validator(mode="after")
    def _some_answer(self) -> Self:
        if not self.approvals and self.approve is None:
            raise ValueError("an approval needs 'approvals' (one per tool call) or 'approve' (true or false)")
        return self

    def answer(self) -> Answer:
        if self.approvals:
            return Answer(verdicts=tuple(p.verdict() for p in self.approvals))
        return Answer(approve=self.approve, approval_request_id=self.approval_request_id, reason=self.reason)


class ToolReturnsBody(_Part):
    """Letta's MessageToolReturnCreate: the results of client-side tools."""

    type: Literal["tool_return"]
    tool_returns: list[ToolReturnBody] = Field(min_length=1, max_length=MAX_LIST_ITEMS)
    otid: str | None = Field(default=None, max_length=255)

    def answer(self) -> Answer:
        return Answer(verdicts=tuple(r.verdict() for r in self.tool_returns))


class ClientToolBody(_Part):
    """Letta's ClientTool: a tool's schema, offered to the model for one request, run by the client."""

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None

    def to_tool(self) -> ClientTool:
        return ClientTool(name=self.name, description=self.description or "", parameters=self.parameters or {})


def client_tools_of(bodies: Sequence[ClientToolBody] | None) -> tuple[ClientTool, ...]:
    """The client-side tools of a request, each with a schema a provider takes, and no name twice.

    Raises:
        InvalidInput: a tool's schema is unusable, or two tools share a name.
    """
    tools = tuple(b.to_tool() for b in bodies or ())
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        problem = schema_problem(tool.json_schema())
        if problem is not None:
            raise InvalidInput(f"client tool {index} ({tool.name!r}): {problem}", field=f"client_tools.{index}")
        if tool.name in seen:
            raise InvalidInput(f"client tool {tool.name!r} is given twice", field="client_tools")
        seen.add(tool.name)
    return tools


def message_type(value: Any) -> str:
    """Which kind of message of a send ``value`` is: one to the agent, or an answer (by its ``type``)."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"<{kind}>" if kind in ("approval", "tool_return") else "<message>"


def answer_of(bodies: Sequence[ApprovalBody | ToolReturnsBody]) -> Answer | None:
    """The one answer a request's messages hold, if any.

    Raises:
        InvalidInput: more than one approval message.
    """
    if len(bodies) > 1:
        raise InvalidInput("send one approval message per request", field="messages")
    return bodies[0].answer() if bodies else None
