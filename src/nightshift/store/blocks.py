"""Blocks of core memory, shared by agents through ``agent_blocks``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.blocks import Block
from nightshift.store.copy import execute_rows
from nightshift.store.mapping import row_reader
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import agent_blocks, blocks

# A block from a row whose last columns are those of ``blocks`` (in the table's order): an
# agent's blocks come after its id. Whether it is standalone matters to the store alone
# (``agents.delete_agent``).
to_block = row_reader(Block, blocks)
agent_block = row_reader(Block, blocks, before=1)


def _values(block: Block) -> dict[str, Any]:
    return {
        "id": block.id,
        "organization_id": block.organization_id,
        "label": block.label,
        "value": block.value,
        "limit": block.limit,
        "description": block.description,
        "read_only": block.read_only,
        "metadata": block.metadata,
        "created_at": block.created_at,
        "updated_at": block.updated_at,
    }


async def insert_blocks(conn: AsyncConnection, new: Sequence[Block], *, standalone: bool = False) -> None:
    """Insert blocks in one statement: ``standalone`` ones made on their own (``POST /v1/blocks``),
    which deleting an agent never deletes, or (by default) ones made with their agents."""
    if new:
        await conn.execute(insert(blocks), [{**_values(b), "standalone": standalone} for b in new])


async def update_blocks(conn: AsyncConnection, changed: Sequence[Block]) -> None:
    """Store label, value, limit, description, read_only, metadata and updated_at of many blocks at once."""
    if not changed:
        return
    statement = (
        update(blocks)
        .where(blocks.c.id == bindparam("b_id"))
        .values(
            label=bindparam("label"),
            value=bindparam("value"),
            limit=bindparam("limit"),
            description=bindparam("description"),
            read_only=bindparam("read_only"),
            metadata=bindparam("metadata"),
            updated_at=bindparam("updated_at"),
        )
    )
    rows = []
    for block in changed:
        values = _values(block)
        values["b_id"] = values.pop("id")
        del values["organization_id"], values["created_at"]
        rows.append(values)
    await execute_rows(conn, statement, rows)
    # A block's label is also kept on the link rows, so agents find it by label; most changes
    # (every memory edit of a step) keep it, and a link row whose label is right is left unwritten.
    await execute_rows(
        conn,
        update(agent_blocks)
        .where(agent_blocks.c.block_id == bindparam("b_id"), agent_blocks.c.label != bindparam("label"))
        .values(label=bindparam("label")),
        [{"b_id": b.id, "label": b.label} for b in changed],
    )


async def get_blocks(conn: AsyncConnection, org_id: str, ids: Iterable[str]) -> list[Block]:
    """The blocks of ``org_id`` among ``ids``."""
    query = select(blocks).where(blocks.c.organization_id == org_id, blocks.c.id.in_(list(ids)))
    return [to_block(r) for r in await conn.execute(query)]


async def list_blocks(conn: AsyncConnection, org_id: str, page: Page, *, label: str | None = None) -> list[Block]:
    """A page of the organization's blocks."""
    query = select(blocks).where(blocks.c.organization_id == org_id)
    if label is not None:
        query = query.where(blocks.c.label == label)
    return [to_block(r) for r in await conn.execute(paginate(query, blocks.c.id, page))]


async def agents_using_block(conn: AsyncConnection, block_id: str) -> list[str]:
    """Ids of the agents the block is attached to."""
    query = select(agent_blocks.c.agent_id).where(agent_blocks.c.block_id == block_id)
    return [str(r) for r in await conn.scalars(query)]


async def delete_block(conn: AsyncConnection, org_id: str, block_id: str) -> bool:
    """Delete a block (detaching it everywhere); False when there was none."""
    result = await conn.execute(delete(blocks).where(blocks.c.organization_id == org_id, blocks.c.id == block_id))
    return result.rowcount > 0
