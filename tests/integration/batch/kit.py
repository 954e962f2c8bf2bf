"""Helpers for the batch-run tests: custom tools, scripted replies, and reading what the model saw."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall

RAISING_TOOL = '''
def flaky_lookup(order_id: str) -> str:
    """Look up an order in a system that is down.

    Args:
        order_id: The order's identifier.
    """
    raise RuntimeError(f"order database unreachable for {order_id}")
'''

SLOW_TOOL = '''
def slow_lookup(order_id: str) -> str:
    """Look up an order very slowly.

    Args:
        order_id: The order's identifier.
    """
    import time

    time.sleep(30)
    return "never"
'''

CHECK_TOOL = '''
def check_stock(item: str) -> str:
    """Check whether an item is in stock.

    Args:
        item: The item's name.
    """
    return "in_stock" if item == "apple" else "sold_out"
'''


def call(name: str, *, heartbeat: bool = False, **arguments: Any) -> ScriptedReply:
    """A scripted tool call."""
    return ScriptedReply(tool_call=ScriptedToolCall(name=name, arguments=arguments, request_heartbeat=heartbeat))


def say(message: str, *, heartbeat: bool = False) -> ScriptedReply:
    """A scripted send_message call."""
    return call("send_message", heartbeat=heartbeat, message=message)


def system_text(body: dict[str, Any]) -> str:
    """The system prompt of a provider request (Anthropic blocks or OpenAI's system message)."""
    system = body.get("system")
    if system is None:
        first = body["messages"][0]
        assert first["role"] in ("system", "developer"), first
        return _text(first["content"])
    return _text(system)


def conversation(body: dict[str, Any]) -> list[str]:
    """Every message of a provider request after the system prompt, flattened to text."""
    out = []
    for message in body["messages"]:
        if message["role"] in ("system", "developer"):
            continue
        out.append(_text(message.get("content")) + json.dumps(message.get("tool_calls") or ""))
    return out


def tool_names(body: dict[str, Any]) -> list[str]:
    """The tools a provider request offered, in order."""
    return [t.get("name") or t["function"]["name"] for t in body.get("tools") or []]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if block.get("type") == "text":
            parts.append(block["text"])
        elif block.get("type") == "tool_result":
            parts.append(_text(block.get("content")))
        elif block.get("type") == "tool_use":
            parts.append(json.dumps({"tool_use": block["name"], "input": block["input"]}))
    return "\n".join(parts)


async def calls_of(admin: EmulatorAdmin, agent_id: str) -> list[dict[str, Any]]:
    """The provider requests the model saw for one agent (its custom_id), oldest first."""
    return [c["body"] for c in await admin.model_calls(custom_id=agent_id)]


async def wait_for(predicate: Any, *, timeout: float = 10) -> None:
    """Wait until the async ``predicate()`` is true."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def by_agent(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Roles of a run's messages per agent, in order."""
    out: dict[str, list[str]] = {}
    for message in messages:
        out.setdefault(message["agent_id"], []).append(message["role"])
    return out


def text_of(message: dict[str, Any]) -> str:
    """The text parts of a run message (GET /v1/messages/batches/{id}/messages)."""
    return "\n".join(p["text"] for p in message["content"] if p["type"] == "text")
