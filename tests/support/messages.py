"""Stored messages and tools for the tests of the provider layer: one agent's, at one fixed time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nightshift.domain.messages import Message, Role

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def msg(role: Role, text: str = "", **fields: Any) -> Message:
    """A message of agent ``a`` created at ``NOW`` (``fields``: the rest of ``Message``)."""
    return Message(id="m", organization_id="o", agent_id="a", role=role, text=text, created_at=NOW, **fields)


SEND: dict[str, Any] = {
    "name": "send_message",
    "description": "Send a message to the user.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
}
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
