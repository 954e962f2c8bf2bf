"""Tools of an organization."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.tools import Tool, ToolType
from nightshift.store.bulk import insert_ignoring_conflicts
from nightshift.store.mapping import row_reader
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import agent_tools, agents, tools

# A tool from a row of ``tools``' columns, in the table's order (``select(tools)``).
to_tool = row_reader(Tool, tools, tool_type=ToolType, tags=tuple)


def _values(tool: Tool) -> dict[str, Any]:
    return {
        "id": tool.id,
        "organization_id": tool.organization_id,
        "name": tool.name,
        "description": tool.description,
        "tool_type": tool.tool_type.value,
        "source_code": tool.source_code,
        "json_schema": tool.json_schema,
        "args_json_schema": tool.args_json_schema,
        "tags": list(tool.tags),
        "return_char_limit": tool.return_char_limit,
        "metadata": tool.metadata,
        "default_requires_approval": tool.default_requires_approval,
        "created_at": tool.created_at,
        "updated_at": tool.updated_at,
    }


async def insert_tools(conn: AsyncConnection, new: Sequence[Tool]) -> None:
    """Insert tools in one statement."""
    if new:
        await conn.execute(insert(tools), [_values(t) for t in new])


async def insert_tools_if_absent(conn: AsyncConnection, new: Sequence[Tool]) -> None:
    """Insert tools, skipping any whose name the organization already has (a concurrent insert)."""
    if new:
        await conn.execute(insert_ignoring_conflicts(conn, tools), [_values(t) for t in new])


async def update_tool(conn: AsyncConnection, tool: Tool) -> None:
    """Store every field of ``tool``."""
    values = _values(tool)
    del values["id"], values["organization_id"], values["created_at"]
    await conn.execute(update(tools).where(tools.c.id == tool.id).values(**values))


async def get_tools(conn: AsyncConnection, org_id: str, ids: Iterable[str]) -> list[Tool]:
    """The tools of ``org_id`` among ``ids`` (missing ones are simply absent)."""
    query = select(tools).where(tools.c.organization_id == org_id, tools.c.id.in_(list(ids)))
    return [to_tool(r) for r in await conn.execute(query)]


async def get_tools_by_name(conn: AsyncConnection, org_id: str, names: Iterable[str]) -> list[Tool]:
    """The tools of ``org_id`` with these names."""
    query = select(tools).where(tools.c.organization_id == org_id, tools.c.name.in_(list(names)))
    return [to_tool(r) for r in await conn.execute(query)]


async def list_tools(conn: AsyncConnection, org_id: str, page: Page, *, name: str | None = None) -> list[Tool]:
    """A page of the organization's tools."""
    query = select(tools).where(tools.c.organization_id == org_id)
    if name is not None:
        query = query.where(tools.c.name == name)
    return [to_tool(r) for r in await conn.execute(paginate(query, tools.c.id, page))]


async def delete_tool(conn: AsyncConnection, org_id: str, tool_id: str) -> bool:
    """Delete a tool (and its attachments); False when there was none."""
    result = await conn.execute(delete(tools).where(tools.c.organization_id == org_id, tools.c.id == tool_id))
    return result.rowcount > 0


async def rules_of_agents_using(conn: AsyncConnection, tool_id: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(agent id, stored tool rules) of every agent the tool is attached to."""
    query = (
        select(agents.c.id, agents.c.tool_rules)
        .join(agent_tools, agent_tools.c.agent_id == agents.c.id)
        .where(agent_tools.c.tool_id == tool_id)
    )
    return [(row.id, row.tool_rules) for row in await conn.execute(query)]


async def providers_of_agents_using(conn: AsyncConnection, tool_id: str) -> set[str]:
    """The providers of the agents the tool is attached to."""
    query = (
        select(agents.c.llm_config)
        .join(agent_tools, agent_tools.c.agent_id == agents.c.id)
        .where(agent_tools.c.tool_id == tool_id)
    )
    return {str(row.llm_config["provider"]) for row in await conn.execute(query)}
