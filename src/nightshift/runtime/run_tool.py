"""Running one of an agent's tools directly, outside any step (Letta's ``agents.tools.run``).

The tool runs as it would in a step: a custom tool in the sandbox with the agent's secrets, a
base tool in-process against the agent's memory, whose edits (and archival inserts) are written
at once. No message is written and the agent's context window does not change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.passages import Passage
from nightshift.domain.tools import ToolType
from nightshift.errors import Conflict, NotFound, ToolError
from nightshift.ids import new_id
from nightshift.runtime.search import StoreSearch
from nightshift.runtime.tool_messages import failed_text
from nightshift.store import agents as agent_store
from nightshift.store import blocks as block_store
from nightshift.store import items as item_store
from nightshift.store import passages as passage_store
from nightshift.tools.base import AgentContext, run_base_tool
from nightshift.tools.models import sandbox_source
from nightshift.tools.results import SandboxCall
from nightshift.tools.sandbox import Sandbox


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRun:
    """What a direct run produced: the value when ``ok``, else ``error`` in Letta's words."""

    ok: bool
    value: Any
    error: str | None = None
    stdout: str = ""
    stderr: str = ""


async def run_agent_tool(
    engine: AsyncEngine,
    sandbox: Sandbox,
    org_id: str,
    agent_id: str,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    now: datetime,
) -> ToolRun:
    """Run ``tool_name`` of the agent with ``arguments``; a failing tool is a result, not an exception.

    ``now`` stamps what a base tool writes (its block edits, its passages).

    Raises:
        NotFound: no such agent, or the agent has no tool of that name.
        Conflict: a base tool would edit the memory of an agent that is in an open batch step.
    """
    async with engine.connect() as conn:
        found = await agent_store.load_agents(conn, org_id, [agent_id])
    if agent_id not in found:
        raise NotFound(f"agent {agent_id} not found")
    agent = found[agent_id]
    tool = agent.tool(tool_name)
    if tool is None:
        names = ", ".join(t.name for t in agent.tools) or "none"
        raise NotFound(f"agent {agent_id} has no tool named {tool_name!r} (its tools: {names})")
    if tool.tool_type is ToolType.CUSTOM:
        result = await sandbox.run(
            SandboxCall(
                organization_id=org_id,
                source_code=sandbox_source(tool),
                function_name=tool.name,
                arguments=arguments,
                env=agent.secrets,
            )
        )
        if not result.ok:
            error = failed_text(tool.name, result.error or "the tool failed")
            return ToolRun(ok=False, value=error, error=error, stdout=result.stdout, stderr=result.stderr)
        return ToolRun(ok=True, value=result.value, stdout=result.stdout, stderr=result.stderr)
    async with engine.begin() as conn:
        context = AgentContext(
            agent_id=agent.id, blocks={b.label: b for b in agent.blocks}, search=StoreSearch(conn), now=now
        )
        try:
            output = await run_base_tool(tool.name, context, arguments)
        except ToolError as exc:
            error = failed_text(tool.name, exc.message)
            return ToolRun(ok=False, value=error, error=error)
        except Exception as exc:  # a bug the call runs into is the tool's failure, as in a step
            error = failed_text(tool.name, f"{type(exc).__name__}: {exc}")
            return ToolRun(ok=False, value=error, error=error)
        if context.changed_labels or context.new_passages:
            if await item_store.agents_in_open_steps(conn, [agent.id]):
                raise Conflict(f"agent {agent.id} is in an open step of a batch run; wait for it or cancel the run")
            await block_store.update_blocks(conn, [context.blocks[label] for label in sorted(context.changed_labels)])
            await passage_store.insert_passages(
                conn,
                [
                    Passage(id=new_id("passage"), organization_id=org_id, agent_id=agent.id, text=text, created_at=now)
                    for text in context.new_passages
                ],
            )
    return ToolRun(ok=True, value=_decoded(output))


def _decoded(output: str) -> Any:
    # Search tools answer with JSON text; the caller gets it as a value, as from a custom tool.
    try:
        return json.loads(output)
    except ValueError:
        return output
