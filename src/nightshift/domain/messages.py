"""Messages: what an agent said, heard and did, in the order the model sees it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from nightshift.domain.fast_init import fast_init


class Role(StrEnum):
    """Who a message is from."""

    SYSTEM = "system"  # the compiled system prompt with memory; always first in context
    USER = "user"  # the user's input, a heartbeat or a system event shown to the model as the user
    ASSISTANT = "assistant"  # the model's turn: reasoning, optional text and its tool calls, in order
    TOOL = "tool"  # a tool's result, answering the assistant's tool call by ``tool_call_id``


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One call the model asked for. ``arguments`` is the JSON text as the model wrote it.

    The text is kept as written (not parsed) so that malformed arguments survive to be reported
    to the model as a tool error instead of being lost. ``signature`` is the provider's opaque
    token of the reasoning behind the call (Gemini's ``thoughtSignature``), which its API wants
    back with the call in the next request.
    """

    id: str
    name: str
    arguments: str
    signature: str | None = None

    def to_json(self) -> dict[str, str]:
        """The call as stored (a message's ``tool_calls``, an item's result)."""
        out = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.signature is not None:
            out["signature"] = self.signature
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        """A call as ``to_json`` stored it."""
        return cls(id=data["id"], name=data["name"], arguments=data["arguments"], signature=data.get("signature"))

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ``ValueError`` when they are not a JSON object."""
        value = json.loads(self.arguments) if self.arguments.strip() else {}
        if not isinstance(value, dict):
            raise ValueError("tool arguments must be a JSON object")
        return value


# The image types both providers take.
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    """An image in a user's message: base64 ``data`` with its ``media_type`` (one of
    ``IMAGE_MEDIA_TYPES``), or a ``url`` the provider fetches."""

    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    def data_url(self) -> str:
        """The image as one URL: its ``url``, or a ``data:`` URL of its bytes."""
        return self.url or f"data:{self.media_type};base64,{self.data}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserInput:
    """What a user sends in one message: its text, the images that come with it, and the sender's
    own id for it (Letta's ``otid``) and name (Letta's ``name``, the participant's), kept on the
    stored message, if any. A text alone is a ``UserInput`` without images."""

    text: str
    images: tuple[Image, ...] = ()
    otid: str | None = None
    name: str | None = None


class MessageKind(StrEnum):
    """What a message is beyond its role: a message of the conversation, or an event the system
    puts in the user's turn (stored by its value; a plain message stores none)."""

    PLAIN = "plain"  # what the user, the agent or a tool said: the conversation itself
    HEARTBEAT = "heartbeat"  # the automatic user turn that gives an agent the step it asked for
    LOGIN = "login"  # the login event a new agent's default messages end with
    MEMORY_PRESSURE = "memory_pressure"  # the notice that the window is filling up
    SUMMARY = "summary"  # stands for the messages that left the window (``context_window.is_summary``)
    # An assistant turn whose calls wait for the client (an approval, a client-side tool's result):
    # while it ends the agent's window, the agent awaits an answer (``domain/approvals.py``).
    APPROVAL_REQUEST = "approval_request"


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A persisted message of one agent.

    ``text`` is the content: the prompt for system, what the user said, the assistant's visible
    text (usually empty: agents talk through ``send_message``), or a tool's result. ``reasoning``
    holds the assistant's inner thoughts. ``is_error`` marks a tool result that is an error.
    ``images`` are the images of a user's message, shown to the model after its text. ``kind``
    tells an event from the conversation; ``otid`` is the sender's own id for an input (Letta's,
    shown back with it); ``stdout`` and ``stderr`` are what a sandboxed tool printed, on its result.
    """

    id: str
    organization_id: str
    agent_id: str
    role: Role
    text: str
    created_at: datetime
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    batch_item_id: str | None = None
    run_id: str | None = None  # the agent run that wrote it (a synchronous or background send)
    step_id: str | None = None  # the step of that run
    kind: MessageKind = MessageKind.PLAIN
    otid: str | None = None
    stdout: tuple[str, ...] = ()
    stderr: tuple[str, ...] = ()
    images: tuple[Image, ...] = ()


SEND_MESSAGE = "send_message"


def said_text(message: Message) -> str:
    """What the message says to its reader: for an assistant turn, the send_message text if any."""
    for call in message.tool_calls:
        if call.name == SEND_MESSAGE:
            try:
                said = call.parsed_arguments().get("message")
            except ValueError:
                continue
            if isinstance(said, str):
                return f"{message.text}\n{said}" if message.text else said
    return message.text


def search_text(message: Message) -> str:
    """The text full-text search indexes: what was said, the assistant's reasoning and what tools returned.

    System messages and events (heartbeats, logins, notices, summaries) are not part of the
    conversation that conversation_search looks through; leaving them out also keeps the index
    small and rewrites of the (long) system message cheap. A tool result is indexed by what
    the tool returned, without the status and time around it.
    """
    if message.role is Role.SYSTEM or message.kind is not MessageKind.PLAIN:
        return ""
    if message.role is Role.TOOL:
        return inner_text(message.text)
    parts = [said_text(message), message.reasoning or ""]
    return "\n".join(p for p in parts if p)


def inner_text(text: str) -> str:
    """The ``message`` inside the JSON a tool result or a system alert holds (a tool message's
    ``{"status", "message", "time"}``: what the tool returned), or the text as it is."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if not isinstance(body, dict) or "message" not in body:
        return text
    returned = body["message"]
    return returned if isinstance(returned, str) else json.dumps(returned)
