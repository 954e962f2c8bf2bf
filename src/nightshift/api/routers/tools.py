"""/v1/tools: custom tools from Python source, and the base tools."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from nightshift.api.deps import Conn, Now, Org, State
from nightshift.api.routers import secured
from nightshift.api.routers.params import PageQuery
from nightshift.api.tool_schemas import ToolCreate, ToolPublic, ToolRunBody, ToolSearch, ToolUpdate
from nightshift.services import tools as service

router = secured("tools")


@router.post("/v1/tools/")
@router.post("/v1/tools", include_in_schema=False)
async def create_tool(body: ToolCreate, conn: Conn, org: Org, state: State, now: Now) -> ToolPublic:
    """Create a tool from Python source. The schema comes from the signature and docstring.

    A 422 says what is wrong with the source (no function, no docstring, an undescribed or
    unsupported argument, or it took longer than ``NIGHTSHIFT_TOOL_READ_SECONDS`` to read); a
    409 means a tool with that name exists (use PUT to replace it).
    """
    return await _create(body, conn, org, state, now, upsert=False)


async def _create(body: ToolCreate, conn: Conn, org: Org, state: State, now: Now, *, upsert: bool) -> ToolPublic:
    tool = await service.create_tool(
        conn,
        org,
        now=now,
        source_code=body.source_code,
        description=body.description,
        tags=body.tags,
        return_char_limit=body.return_char_limit,
        json_schema=body.json_schema,
        args_json_schema=body.args_json_schema,
        default_requires_approval=bool(body.default_requires_approval),
        upsert=upsert,
        read_seconds=state.settings.tool_read_seconds,
    )
    return ToolPublic.of(tool)


@router.put("/v1/tools/")
@router.put("/v1/tools", include_in_schema=False)
async def upsert_tool(body: ToolCreate, conn: Conn, org: Org, state: State, now: Now) -> ToolPublic:
    """Create a tool, or replace the one with the same function name."""
    return await _create(body, conn, org, state, now, upsert=True)


@router.get("/v1/tools/")
@router.get("/v1/tools", include_in_schema=False)
async def list_tools(
    conn: Conn, org: Org, now: Now, page: PageQuery, name: Annotated[str | None, Query()] = None
) -> list[ToolPublic]:
    """The organization's tools (base tools appear once an agent has used them)."""
    return [ToolPublic.of(t) for t in await service.list_tools(conn, org, page, now=now, name=name)]


@router.post("/v1/tools/search")
async def search_tools(body: ToolSearch, conn: Conn, org: Org, now: Now) -> list[dict[str, Any]]:
    """Tools whose name, description or tags hold the query's words, best first (Letta's ToolSearchResult).

    nightshift has no tool embeddings: every ``search_mode`` is this word search, and the score
    is the share of the query's words a tool holds.
    """
    found = await service.search_tools(
        conn, org, now=now, query=body.query, tags=body.tags or (), tool_types=body.tool_types or (), limit=body.limit
    )
    return [
        {
            "tool": ToolPublic.of(match.tool).model_dump(mode="json"),
            "combined_score": match.score,
            "embedded_text": match.text,
            "fts_rank": match.rank,
            "vector_rank": None,
        }
        for match in found
    ]


@router.post("/v1/agents/{agent_id}/tools/{tool_name}/run")
async def run_tool(
    agent_id: str, tool_name: str, body: ToolRunBody, state: State, org: Org, now: Now
) -> dict[str, Any]:
    """Run one of the agent's tools now, outside any step (Letta's ToolExecutionResult).

    A tool that fails is a 200 with status "error"; a 404 when the agent has no such tool.
    Memory edits of base tools are kept; no message is written.
    """
    result = await service.run_tool(state.engine, state.sandbox, org, agent_id, tool_name, body.args, now=now)
    return {
        "status": "success" if result.ok else "error",
        "func_return": result.value,
        "agent_state": None,
        "stdout": [result.stdout] if result.stdout else [],
        "stderr": [result.stderr] if result.stderr else [],
        "sandbox_config_fingerprint": None,
    }


@router.get("/v1/tools/{tool_id}")
async def get_tool(tool_id: str, conn: Conn, org: Org) -> ToolPublic:
    return ToolPublic.of(await service.get_tool(conn, org, tool_id))


@router.patch("/v1/tools/{tool_id}")
async def update_tool(tool_id: str, body: ToolUpdate, conn: Conn, org: Org, state: State, now: Now) -> ToolPublic:
    """Change a tool; new source code regenerates the schema and must keep the function name."""
    tool = await service.update_tool(
        conn,
        org,
        tool_id,
        body.to_changes(),
        now=now,
        read_seconds=state.settings.tool_read_seconds,
    )
    return ToolPublic.of(tool)


@router.delete("/v1/tools/{tool_id}")
async def delete_tool(tool_id: str, conn: Conn, org: Org) -> dict[str, str]:
    """Delete a tool; it is detached from every agent. A 409 while an agent's tool rule names it."""
    await service.delete_tool(conn, org, tool_id)
    return {"message": f"tool {tool_id} deleted"}
