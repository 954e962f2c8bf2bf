"""The messages a tool call leaves in an agent's window: its result, or its failure, worded as
Letta's are (the models and Letta's clients know these shapes)."""

from __future__ import annotations

import json
from datetime import datetime

from nightshift.domain.agents import Agent
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.ids import new_id


def failed_text(name: str, error: str) -> str:
    """A tool's failure as Letta words it."""
    return f"Error executing function {name}: {error}"


def truncated(output: str, limit: int) -> str:
    """``output`` cut to ``limit`` characters, with a note saying it was, as Letta's tools are."""
    if len(output) <= limit:
        return output
    return (
        f"{output[:limit]}... [NOTE: function output was truncated since it exceeded the character limit "
        f"({len(output)} > {limit})]"
    )


def tool_message(
    agent: Agent,
    batch_item_id: str | None,
    call: ToolCall,
    output: str,
    *,
    is_error: bool,
    now: datetime,
    stdout: str = "",
    stderr: str = "",
) -> Message:
    """The tool message answering ``call``: its output (or error) in Letta's JSON envelope."""
    body = {"status": "Failed" if is_error else "OK", "message": output, "time": now.isoformat()}
    return Message(
        id=new_id("message"),
        organization_id=agent.organization_id,
        agent_id=agent.id,
        role=Role.TOOL,
        text=json.dumps(body),
        tool_call_id=call.id,
        name=call.name,
        is_error=is_error,
        batch_item_id=batch_item_id,
        created_at=now,
        # Letta's tool returns carry what the tool printed as lists of text.
        stdout=(stdout,) if stdout else (),
        stderr=(stderr,) if stderr else (),
    )
