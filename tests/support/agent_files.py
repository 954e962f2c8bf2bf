"""The project's own Agent Files (``tests/data/agentfiles``) and what a round trip must keep of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

AGENT_FILES = Path(__file__).parents[1] / "data" / "agentfiles"
SUPPORT_DESK = AGENT_FILES / "support_desk.af"  # two agents sharing a block, base and custom tools, messages
SCREENING = AGENT_FILES / "screening_workflow.af"  # one agent, a chain of tool rules over custom tools
# letta_v1 agents (Letta's current default loop), modelled on the files Letta publishes:
V1_COMPANION = AGENT_FILES / "v1_companion.af"  # OpenAI, memory blocks, the v1 memory tools, no send_message
V1_RESEARCHER = AGENT_FILES / "v1_researcher.af"  # Anthropic, custom tools (lookup_city), exit_loop, autoclear


def document(path: Path) -> dict[str, Any]:
    """The document an Agent File holds (they are double-encoded, as Letta publishes them)."""
    inner = json.loads(path.read_text())
    assert isinstance(inner, str), "the project's agent files are double-encoded"
    loaded = json.loads(inner)
    assert isinstance(loaded, dict)
    return loaded


def double_encoded(doc: dict[str, Any]) -> bytes:
    """``doc`` written as Letta publishes agent files."""
    return json.dumps(json.dumps(doc)).encode()


def rules(agent: dict[str, Any]) -> list[dict[str, Any]]:
    """An agent's tool rules without the empty fields either side may leave out."""
    return [
        {k: v for k, v in rule.items() if v is not None and k not in ("args", "child_arg_nodes")}
        for rule in agent["tool_rules"]
    ]


def blocks_of(doc: dict[str, Any], agent: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The agent's blocks as (label, value, limit, description, read_only), in its order."""
    by_id = {b["id"]: b for b in doc["blocks"]}
    return [
        tuple(by_id[i][k] for k in ("label", "value", "limit", "description", "read_only")) for i in agent["block_ids"]
    ]


def tools_of(doc: dict[str, Any], agent: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The agent's tools by name: (tool_type, source_code)."""
    by_id = {t["id"]: t for t in doc["tools"]}
    return {by_id[i]["name"]: (by_id[i]["tool_type"], by_id[i]["source_code"]) for i in agent["tool_ids"]}


def message_text(message: dict[str, Any]) -> str:
    """A message's text parts, joined."""
    return "\n".join(p["text"] for p in message["content"] if p["type"] == "text")


def message_essence(message: dict[str, Any]) -> tuple[Any, ...]:
    """What a message must keep through a round trip (tool-call ids aside, which a provider may refuse)."""
    reasoning = [p["reasoning"] for p in message["content"] if p["type"] == "reasoning"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"] or []]
    status = [r["status"] for r in message["tool_returns"] or []]
    text = "" if message["role"] == "system" else message_text(message)
    return (message["role"], text, reasoning, calls, status, message["created_at"])
