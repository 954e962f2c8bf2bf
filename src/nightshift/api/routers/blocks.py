"""/v1/blocks: standalone blocks of core memory, which agents may share."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from nightshift.api.deps import Conn, Now, Org, ReadConn
from nightshift.api.routers import secured
from nightshift.api.routers.params import PageQuery
from nightshift.api.schemas import AgentPublic, BlockCreate, BlockPublic, BlockUpdate
from nightshift.services import blocks as service

router = secured("blocks")


@router.post("/v1/blocks/")
@router.post("/v1/blocks", include_in_schema=False)
async def create_block(body: BlockCreate, conn: Conn, org: Org, now: Now) -> BlockPublic:
    """Create a block; a value longer than its limit is a 422."""
    return BlockPublic.of(await service.create_block(conn, org, body.to_spec(), now=now))


@router.get("/v1/blocks/")
@router.get("/v1/blocks", include_in_schema=False)
async def list_blocks(
    conn: ReadConn, org: Org, page: PageQuery, label: Annotated[str | None, Query()] = None
) -> list[BlockPublic]:
    return [BlockPublic.of(b) for b in await service.list_blocks(conn, org, page, label=label)]


@router.get("/v1/blocks/{block_id}")
async def get_block(block_id: str, conn: ReadConn, org: Org) -> BlockPublic:
    return BlockPublic.of(await service.get_block(conn, org, block_id))


@router.patch("/v1/blocks/{block_id}")
async def update_block(block_id: str, body: BlockUpdate, conn: Conn, org: Org, now: Now) -> BlockPublic:
    """Change a block. Agents sharing it see the change in their system message at their next step."""
    block = await service.get_block(conn, org, block_id)
    return BlockPublic.of(await service.update_block(conn, block, body.to_changes(), now=now))


@router.delete("/v1/blocks/{block_id}")
async def delete_block(block_id: str, conn: Conn, org: Org) -> dict[str, str]:
    """Delete a block, detaching it from every agent."""
    await service.delete_block(conn, org, block_id)
    return {"message": f"block {block_id} deleted"}


@router.get("/v1/blocks/{block_id}/agents")
async def block_agents(block_id: str, conn: ReadConn, org: Org, page: PageQuery) -> list[AgentPublic]:
    """The agents sharing this block, oldest first (``order=desc`` for newest first)."""
    return AgentPublic.many(await service.block_agents(conn, org, block_id, page))
