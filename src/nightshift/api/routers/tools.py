"""/v1/tools: custom tools from Python source, and the base tools."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from nightshift.api.deps import Conn, Org
from nightshift.api.routers.params import PageQuery
from nightshift.api.schemas import ToolCreate, ToolPublic, ToolUpdate
from nightshift.services import tools as service
from nightshift.store import tools as tool_store

router = APIRouter(tags=["tools"])


@router.post("/v1/tools/")
@router.post("/v1/tools", include_in_schema=False)
async def create_tool(body: ToolCreate, conn: Conn, org: Org) -> ToolPublic:
    """Create a tool from Python source. The schema comes from the signature and docstring.

    A 422 says what is wrong with the source (no function, no docstring, an undescribed or
    unsupported argument); a 409 means a tool with that name exists (use PUT to replace it).
    """
    return await _create(body, conn, org, upsert=False)


async def _create(body: ToolCreate, conn: Conn, org: Org, *, upsert: bool) -> ToolPublic:
    tool = await service.create_tool(
        conn,
        org,
        source_code=body.source_code,
        description=body.description,
        tags=body.tags,
        return_char_limit=body.return_char_limit,
        json_schema=body.json_schema,
        upsert=upsert,
    )
    return ToolPublic.of(tool)


@router.put("/v1/tools/")
@router.put("/v1/tools", include_in_schema=False)
async def upsert_tool(body: ToolCreate, conn: Conn, org: Org) -> ToolPublic:
    """Create a tool, or replace the one with the same function name."""
    return await _create(body, conn, org, upsert=True)


@router.get("/v1/tools/")
@router.get("/v1/tools", include_in_schema=False)
async def list_tools(
    conn: Conn, org: Org, page: PageQuery, name: Annotated[str | None, Query()] = None
) -> list[ToolPublic]:
    """The organization's tools (base tools appear once an agent has used them)."""
    await service.ensure_base_tools(conn, org)
    return [ToolPublic.of(t) for t in await tool_store.list_tools(conn, org, page, name=name)]


@router.get("/v1/tools/{tool_id}")
async def get_tool(tool_id: str, conn: Conn, org: Org) -> ToolPublic:
    return ToolPublic.of(await service.get_tool(conn, org, tool_id))


@router.patch("/v1/tools/{tool_id}")
async def update_tool(tool_id: str, body: ToolUpdate, conn: Conn, org: Org) -> ToolPublic:
    """Change a tool; new source code regenerates the schema and must keep the function name."""
    tool = await service.update_tool(
        conn,
        org,
        tool_id,
        source_code=body.source_code,
        description=body.description,
        tags=body.tags,
        return_char_limit=body.return_char_limit,
    )
    return ToolPublic.of(tool)


@router.delete("/v1/tools/{tool_id}")
async def delete_tool(tool_id: str, conn: Conn, org: Org) -> dict[str, str]:
    """Delete a tool; it is detached from every agent. A 409 while an agent's tool rule names it."""
    await service.delete_tool(conn, org, tool_id)
    return {"message": f"tool {tool_id} deleted"}
