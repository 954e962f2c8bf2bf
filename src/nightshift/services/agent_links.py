"""What an agent is linked to: its tools (and whether a call of each waits for approval), and the
blocks it shares with other agents. Each change is saved with ``agents.save_agent``, which
rewrites the system message when the agent's memory changed."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agents import Agent
from nightshift.domain.approvals import with_default_approvals
from nightshift.domain.blocks import Block, check_unique_labels
from nightshift.domain.tool_rules import RequiresApprovalToolRule, check_tool_rules
from nightshift.errors import InvalidInput, NotFound
from nightshift.services.agents import get_agent, save_agent
from nightshift.services.tools import resolve_tools
from nightshift.store import blocks as block_store


async def attach_tool(conn: AsyncConnection, org_id: str, agent_id: str, tool_id: str, *, now: datetime) -> Agent:
    """Give the agent a tool (no change when it has it already)."""
    agent = await get_agent(conn, org_id, agent_id)
    tool = (await resolve_tools(conn, org_id, now=now, ids=[tool_id]))[0]
    if any(t.id == tool.id for t in agent.tools):
        return agent
    if agent.tool(tool.name) is not None:
        raise InvalidInput(f"the agent already has a tool named {tool.name!r}", field="tool_id")
    rules = tuple(with_default_approvals(agent.tool_rules, [tool]))
    return await save_agent(conn, agent, replace(agent, tools=(*agent.tools, tool), tool_rules=rules), now=now)


async def set_requires_approval(
    conn: AsyncConnection, org_id: str, agent_id: str, tool_name: str, requires: bool, *, now: datetime
) -> Agent:
    """Make calls of the agent's tool ``tool_name`` wait for approval, or run at once (Letta's modify_approval).

    Raises:
        NotFound: no such agent, or it has no tool of that name.
    """
    agent = await get_agent(conn, org_id, agent_id)
    if agent.tool(tool_name) is None:
        raise NotFound(f"agent {agent_id} has no tool named {tool_name!r}")
    kept = [r for r in agent.tool_rules if not (isinstance(r, RequiresApprovalToolRule) and r.tool_name == tool_name)]
    rules = [*kept, RequiresApprovalToolRule(tool_name=tool_name)] if requires else kept
    return await save_agent(conn, agent, replace(agent, tool_rules=tuple(rules)), now=now)


async def detach_tool(conn: AsyncConnection, org_id: str, agent_id: str, tool_id: str, *, now: datetime) -> Agent:
    """Take a tool away from the agent (its tool rules stay, as Letta keeps them)."""
    agent = await get_agent(conn, org_id, agent_id)
    if not any(t.id == tool_id for t in agent.tools):
        raise NotFound(f"tool {tool_id} is not attached to agent {agent_id}")
    updated = replace(agent, tools=tuple(t for t in agent.tools if t.id != tool_id))
    check_tool_rules(updated.tool_rules, [t.name for t in updated.tools])
    return await save_agent(conn, agent, updated, now=now)


async def attach_block(conn: AsyncConnection, org_id: str, agent_id: str, block_id: str, *, now: datetime) -> Agent:
    """Share an existing block with the agent."""
    agent = await get_agent(conn, org_id, agent_id)
    found = await block_store.get_blocks(conn, org_id, [block_id])
    if not found:
        raise NotFound(f"block {block_id} not found")
    if any(b.id == block_id for b in agent.blocks):
        return agent
    blocks = (*agent.blocks, found[0])
    check_unique_labels(blocks)
    return await save_agent(conn, agent, replace(agent, blocks=blocks), now=now)


async def detach_block(conn: AsyncConnection, org_id: str, agent_id: str, block_id: str, *, now: datetime) -> Agent:
    """Remove a block from the agent's memory (the block itself is kept)."""
    agent = await get_agent(conn, org_id, agent_id)
    if not any(b.id == block_id for b in agent.blocks):
        raise NotFound(f"block {block_id} is not attached to agent {agent_id}")
    return await save_agent(
        conn, agent, replace(agent, blocks=tuple(b for b in agent.blocks if b.id != block_id)), now=now
    )


def agent_block(agent: Agent, label: str) -> Block:
    """The agent's block with this label, or NotFound."""
    block = agent.block(label)
    if block is None:
        raise NotFound(f"agent {agent.id} has no block labelled {label!r}")
    return block
