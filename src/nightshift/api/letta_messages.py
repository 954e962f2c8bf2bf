"""Our stored messages as Letta's message union (system, user, reasoning, assistant, tool call, tool return).

One stored assistant message becomes a reasoning message plus an assistant message (for
send_message) or a tool-call message; all parts keep the stored message's id, as Letta does,
so that ``after=<id>`` pagination works on stored ids.
"""

from __future__ import annotations

import json
from typing import Any

from nightshift.domain.messages import Message, Role

SEND_MESSAGE = "send_message"


def _base(message: Message, message_type: str) -> dict[str, Any]:
    return {
        "id": message.id,
        "date": message.created_at.isoformat(),
        "message_type": message_type,
        "name": message.name,
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


def to_letta_messages(message: Message) -> list[dict[str, Any]]:
    """The Letta messages one stored message is shown as."""
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
            }
        ]
    parts: list[dict[str, Any]] = []
    if message.reasoning:
        parts.append(_base(message, "reasoning_message") | {"reasoning": message.reasoning})
    if message.text:
        parts.append(_base(message, "assistant_message") | {"content": message.text})
    for call in message.tool_calls:
        if call.name == SEND_MESSAGE:
            try:
                said = call.parsed_arguments().get("message")
            except (ValueError, json.JSONDecodeError):
                said = None
            if isinstance(said, str):
                parts.append(_base(message, "assistant_message") | {"content": said})
                continue
        tool_call = {"name": call.name, "arguments": call.arguments, "tool_call_id": call.id}
        parts.append(_base(message, "tool_call_message") | {"tool_call": tool_call})
    return parts


def run_message_json(message: Message) -> dict[str, Any]:
    """A message of a batch run as ``GET /v1/messages/batches/{id}/messages`` shows it (OpenAI-like)."""
    content: list[dict[str, Any]] = []
    if message.reasoning:
        content.append({"type": "reasoning", "reasoning": message.reasoning, "is_native": False})
    if message.text:
        content.append({"type": "text", "text": message.text})
    return {
        "id": message.id,
        "agent_id": message.agent_id,
        "role": message.role.value,
        "content": content,
        "name": message.name,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
        "created_at": message.created_at,
        "batch_item_id": message.batch_item_id,
    }
