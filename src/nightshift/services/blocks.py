"""Creating and changing blocks of core memory."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agents import Agent
from nightshift.domain.blocks import Block, check_block
from nightshift.domain.pagination import Page, page_of
from nightshift.domain.unset import UNSET, Maybe, set_fields
from nightshift.errors import InvalidInput, NotFound
from nightshift.services.agents import NewBlock, new_block
from nightshift.store import agents as agent_store
from nightshift.store import blocks as block_store


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockChanges:
    """What an update changes on a block: every field left UNSET stays as it is.

    Only the description can be cleared (None); the other fields always hold a value.
    """

    value: Maybe[str] = UNSET
    limit: Maybe[int] = UNSET
    label: Maybe[str] = UNSET
    description: Maybe[str | None] = UNSET
    read_only: Maybe[bool] = UNSET
    metadata: Maybe[dict[str, Any]] = UNSET


async def create_block(conn: AsyncConnection, org_id: str, spec: NewBlock, *, now: datetime) -> Block:
    """A standalone block, made at ``now``, to be shared with agents later; deleting them never deletes it."""
    block = new_block(org_id, spec, now)
    await block_store.insert_blocks(conn, [block], standalone=True)
    return block


async def get_block(conn: AsyncConnection, org_id: str, block_id: str) -> Block:
    """The block, or NotFound."""
    found = await block_store.get_blocks(conn, org_id, [block_id])
    if not found:
        raise NotFound(f"block {block_id} not found")
    return found[0]


async def list_blocks(conn: AsyncConnection, org_id: str, page: Page, *, label: str | None = None) -> list[Block]:
    """A page of the organization's blocks (with ``label`` only, when given)."""
    return await block_store.list_blocks(conn, org_id, page, label=label)


async def block_agents(conn: AsyncConnection, org_id: str, block_id: str, page: Page) -> list[Agent]:
    """A page of the agents sharing the block, by id (NotFound for a block that is not the organization's)."""
    await get_block(conn, org_id, block_id)
    ids = page_of(sorted(await block_store.agents_using_block(conn, block_id)), page, key=lambda i: i)
    loaded = await agent_store.load_agents(conn, org_id, ids)
    return [loaded[i] for i in ids if i in loaded]


async def update_block(conn: AsyncConnection, block: Block, changes: BlockChanges, *, now: datetime) -> Block:
    """Apply ``changes``, keeping the value within the limit and the label free among the block's agents.

    Agents using the block see the change at their next step, when their system message is rebuilt.
    """
    updated = replace(block, **set_fields(changes), updated_at=now)
    check_block(updated.label, updated.value, updated.limit)
    if updated.label != block.label:
        await _check_label_free(conn, block, updated.label)
    await block_store.update_blocks(conn, [updated])
    return updated


async def _check_label_free(conn: AsyncConnection, block: Block, label: str) -> None:
    """Refuse a new label that another block of an agent sharing ``block`` already has."""
    agent_ids = await block_store.agents_using_block(conn, block.id)
    agents = await agent_store.load_agents(conn, block.organization_id, agent_ids)
    clashing = sorted(a.id for a in agents.values() if any(b.label == label and b.id != block.id for b in a.blocks))
    if clashing:
        raise InvalidInput(
            f"agent {clashing[0]} already has a block labelled {label!r}; an agent has one block per label",
            field="label",
        )


async def delete_block(conn: AsyncConnection, org_id: str, block_id: str) -> None:
    """Delete a block, detaching it from every agent."""
    if not await block_store.delete_block(conn, org_id, block_id):
        raise NotFound(f"block {block_id} not found")
