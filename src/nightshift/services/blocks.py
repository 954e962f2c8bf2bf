"""Creating and changing blocks of core memory."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.blocks import Block, check_block
from nightshift.errors import NotFound
from nightshift.services.agents import NewBlock, new_block
from nightshift.store import blocks as block_store


async def create_block(conn: AsyncConnection, org_id: str, spec: NewBlock) -> Block:
    """A standalone block, to be shared with agents later."""
    block = new_block(org_id, spec, datetime.now(UTC))
    await block_store.insert_blocks(conn, [block])
    return block


async def get_block(conn: AsyncConnection, org_id: str, block_id: str) -> Block:
    """The block, or NotFound."""
    found = await block_store.get_blocks(conn, org_id, [block_id])
    if not found:
        raise NotFound(f"block {block_id} not found")
    return found[0]


async def update_block(conn: AsyncConnection, block: Block, changes: dict[str, Any]) -> Block:
    """Apply ``changes`` (value, limit, label, description, read_only, metadata), keeping value within limit.

    Agents using the block see the change at their next step, when their system message is rebuilt.
    """
    allowed = {"value", "limit", "label", "description", "read_only", "metadata"}
    updated = replace(block, **{k: v for k, v in changes.items() if k in allowed}, updated_at=datetime.now(UTC))
    check_block(updated.label, updated.value, updated.limit)
    await block_store.update_blocks(conn, [updated])
    return updated


async def delete_block(conn: AsyncConnection, org_id: str, block_id: str) -> None:
    """Delete a block, detaching it from every agent."""
    if not await block_store.delete_block(conn, org_id, block_id):
        raise NotFound(f"block {block_id} not found")
