"""Our stored messages as Letta's message union (system, user, reasoning, assistant, tool call, tool return).

One stored assistant message becomes a reasoning message plus an assistant message (for
send_message) or a tool-call message (an approval request message when its calls wait for the
client); all parts keep the stored message's id, as Letta does,
so that ``after=<id>`` pagination works on stored ids.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Literal, get_args

from nightshift.domain.messages import Message, MessageKind, Role
from nightshift.runtime.sync import SyncResult

SEND_MESSAGE = "send_message"
MESSAGE_KWARG = "message"
LettaMessageType = Literal[
    "system_message",
    "user_message",
    "assistant_message",
    "reasoning_message",
    "hidden_reasoning_message",
    "tool_call_message",
    "tool_return_message",
    "approval_request_message",
    "approval_response_message",
    # letta-client 1.12's: nightshift shows none of these (a filter naming only them shows nothing).
    "summary_message",
    "event_message",
]
MESSAGE_TYPES: tuple[str, ...] = get_args(LettaMessageType)


@dataclass(frozen=True, slots=True, kw_only=True)
class LettaView:
    """How a send asked to see its messages (Letta's request_config).

    ``use_assistant_message``: a call of ``assistant_tool`` shows as an assistant message whose
    content is its ``assistant_kwarg`` argument; without it, as a tool call like any other. Its
    tool return is shown either way. ``types``: only these message types (None: all).
    """

    use_assistant_message: bool = True
    assistant_tool: str = SEND_MESSAGE
    assistant_kwarg: str = MESSAGE_KWARG
    types: frozenset[str] | None = None


DEFAULT_VIEW = LettaView()


def _otid(message: Message, index: int) -> str:
    """The part's ``otid``: the sender's own for an input that gave one, else one derived from the id.

    Derived ids are stable (the same message shows the same otids every time) and distinct per part.
    """
    given = message.otid
    if index == 0 and isinstance(given, str):
        return given
    try:
        base = uuid.UUID(message.id.split("-", 1)[1])
    except (IndexError, ValueError):
        base = uuid.uuid5(uuid.NAMESPACE_URL, message.id)
    return str(uuid.UUID(int=(base.int + index) % (1 << 128)))


def _base(message: Message, message_type: str, index: int = 0) -> dict[str, Any]:
    return {
        "id": message.id,
        "date": message.created_at.isoformat(),
        "message_type": message_type,
        "name": message.name,
        "otid": _otid(message, index),
        "run_id": message.run_id,
        "step_id": message.step_id,
        "agent_id": message.agent_id,
        "batch_item_id": message.batch_item_id,
    }


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    """A user's text, or Letta's content parts when images came with it (text first, as the model saw it)."""
    if not message.images:
        return message.text
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    for image in message.images:
        source = (
            {"type": "url", "url": image.url}
            if image.url
            else {"type": "base64", "media_type": image.media_type, "data": image.data}
        )
        parts.append({"type": "image", "source": source})
    return parts


def is_heartbeat(message: Message) -> bool:
    """Whether the message is the automatic user turn between two steps of a run."""
    return message.role is Role.USER and message.kind is MessageKind.HEARTBEAT


def to_letta_messages(message: Message, view: LettaView = DEFAULT_VIEW) -> list[dict[str, Any]]:
    """The Letta messages one stored message is shown as, in ``view`` (by default Letta's defaults).

    Each part carries the message's run and step ids and an ``otid``; the one place that turns a
    stored message into Letta's shapes, for responses, listings and streams alike.
    """
    parts = _parts(message, view)
    if view.types is not None:
        parts = [p for p in parts if p["message_type"] in view.types]
    return parts


def _parts(message: Message, view: LettaView) -> list[dict[str, Any]]:
    if message.role is Role.SYSTEM:
        return [_base(message, "system_message") | {"content": message.text}]
    if message.role is Role.USER:
        return [_base(message, "user_message") | {"content": _user_content(message)}]
    if message.role is Role.TOOL:
        return [
            _base(message, "tool_return_message")
            | {
                "tool_return": message.text,
                "status": "error" if message.is_error else "success",
                "tool_call_id": message.tool_call_id or "",
                "stdout": list(message.stdout) if message.stdout else None,
                "stderr": list(message.stderr) if message.stderr else None,
            }
        ]
    parts: list[dict[str, Any]] = []
    if message.reasoning:
        parts.append(_base(message, "reasoning_message", len(parts)) | {"reasoning": message.reasoning})
    if message.text:
        parts.append(_base(message, "assistant_message", len(parts)) | {"content": message.text})
    if message.kind is MessageKind.APPROVAL_REQUEST:
        # The calls wait for the client's answer: shown together, as one request (by the message's id).
        calls = [{"name": c.name, "arguments": c.arguments, "tool_call_id": c.id} for c in message.tool_calls]
        parts.append(
            _base(message, "approval_request_message", len(parts)) | {"tool_call": calls[0], "tool_calls": calls}
        )
        return parts
    for call in message.tool_calls:
        if view.use_assistant_message and call.name == view.assistant_tool:
            try:
                said = call.parsed_arguments().get(view.assistant_kwarg)
            except (ValueError, json.JSONDecodeError):
                said = None
            if isinstance(said, str):
                parts.append(_base(message, "assistant_message", len(parts)) | {"content": said})
                continue
        tool_call = {"name": call.name, "arguments": call.arguments, "tool_call_id": call.id}
        parts.append(
            _base(message, "tool_call_message", len(parts)) | {"tool_call": tool_call, "tool_calls": [tool_call]}
        )
    return parts


def usage_statistics(result: SyncResult) -> dict[str, Any]:
    """Letta's ``usage_statistics`` of a send: its tokens (prompt = every input token, cached or not) and steps."""
    usage = result.usage
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {
        "message_type": "usage_statistics",
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "cached_input_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "step_count": result.steps,
    }
