"""Sleep-time groups: pairing main agents with sleep-time agents, the groups themselves, and
stepping the due ones now.

``enable_sleeptime`` on an agent (``pair``) makes what Letta makes: a ``sleeptime_agent`` named
after it, on its model, sharing its blocks and with a ``memory_persona`` block of its own, and a
group of manager type ``sleeptime`` that ties the two (frequency 5). Unlike Letta's, the sleep-time
agent clears its window after each run (``message_buffer_autoclear``; its messages stay in recall).
When the sleep-time agents run is ``batch/sleeptime.py``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch import sleeptime
from nightshift.clock import Clock
from nightshift.domain.agents import Agent, AgentType
from nightshift.domain.groups import (
    DEFAULT_SLEEPTIME_FREQUENCY,
    SLEEPTIME_SUFFIX,
    Group,
    ManagerType,
    check_frequency,
)
from nightshift.domain.messages import Message
from nightshift.domain.unset import UNSET, Maybe, set_fields
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.ids import new_id
from nightshift.runtime.prompts import SLEEPTIME_PERSONA
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.services.batch_runs import BatchRunView, views_of
from nightshift.store import agents as agent_store
from nightshift.store import groups as group_store
from nightshift.store import messages as message_store
from nightshift.store.pagination import Page

PERSONA_LABEL = "memory_persona"


async def pair(
    conn: AsyncConnection,
    org_id: str,
    mains: Sequence[Agent],
    *,
    now: datetime,
    frequency: int | None = DEFAULT_SLEEPTIME_FREQUENCY,
) -> list[Group]:
    """Give each of ``mains`` a sleep-time agent and a group (a fixed number of statements);
    an agent that manages a group already is left as it is.

    Returns the groups made, in ``mains``' order.
    """
    mains = [m for m in mains if m.managed_group_id is None]
    if not mains:
        return []
    specs = [
        AgentSpec(
            name=main.name + SLEEPTIME_SUFFIX,
            llm_config=main.llm_config,
            agent_type=AgentType.SLEEPTIME,
            embedding=main.embedding,
            block_ids=[b.id for b in main.blocks],
            memory_blocks=[] if main.block(PERSONA_LABEL) else [NewBlock(label=PERSONA_LABEL, value=SLEEPTIME_PERSONA)],
            initial_messages=(),
            # Each run's transcript is folded into the blocks: the next run needs the blocks and its
            # own transcript, not the earlier ones (a window that grew would be paid at every run).
            message_buffer_autoclear=True,
        )
        for main in mains
    ]
    helpers = await create_agents(conn, org_id, specs, now=now)
    made = [
        Group(
            id=new_id("group"),
            organization_id=org_id,
            manager_type=ManagerType.SLEEPTIME,
            agent_ids=(helper.id,),
            manager_agent_id=main.id,
            sleeptime_agent_frequency=frequency,
            shared_block_ids=tuple(b.id for b in main.blocks),
            created_at=now,
            updated_at=now,
        )
        for main, helper in zip(mains, helpers, strict=True)
    ]
    await group_store.insert_groups(conn, made)
    return made


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpec:
    """A group to create (``POST /v1/groups``): a sleep-time one, its agents already made."""

    agent_ids: Sequence[str]
    manager_agent_id: str
    description: str = ""
    sleeptime_agent_frequency: int | None = DEFAULT_SLEEPTIME_FREQUENCY
    shared_block_ids: Sequence[str] = ()
    hidden: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupChanges:
    """What an update changes on a group; fields left UNSET stay as they are."""

    agent_ids: Maybe[Sequence[str]] = UNSET
    description: Maybe[str] = UNSET
    manager_agent_id: Maybe[str] = UNSET
    sleeptime_agent_frequency: Maybe[int | None] = UNSET
    shared_block_ids: Maybe[Sequence[str]] = UNSET


async def create_group(conn: AsyncConnection, org_id: str, spec: GroupSpec, *, now: datetime) -> Group:
    """A sleep-time group of agents that exist; the manager may manage no other group.

    Raises:
        NotFound: an agent that does not exist (or is another organization's).
        InvalidInput: no sleep-time agent, the manager among them, or a bad frequency.
        Conflict: the manager already manages a group.
    """
    group = Group(
        id=new_id("group"),
        organization_id=org_id,
        manager_type=ManagerType.SLEEPTIME,
        description=spec.description,
        agent_ids=tuple(dict.fromkeys(spec.agent_ids)),
        manager_agent_id=spec.manager_agent_id,
        sleeptime_agent_frequency=check_frequency(spec.sleeptime_agent_frequency),
        shared_block_ids=tuple(spec.shared_block_ids),
        hidden=spec.hidden,
        created_at=now,
        updated_at=now,
    )
    await _check_members(conn, group, current=None)
    await group_store.insert_groups(conn, [group])
    return group


async def _check_members(conn: AsyncConnection, group: Group, *, current: Group | None) -> None:
    if not group.agent_ids:
        raise InvalidInput("a sleeptime group needs at least one agent in agent_ids", field="agent_ids")
    assert group.manager_agent_id is not None
    if group.manager_agent_id in group.agent_ids:
        raise InvalidInput("the manager agent cannot be one of the group's agent_ids", field="agent_ids")
    wanted = [group.manager_agent_id, *group.agent_ids]
    found = await agent_store.load_agents(conn, group.organization_id, wanted)
    missing = [a for a in wanted if a not in found]
    if missing:
        raise NotFound(f"agents not found: {', '.join(missing)}")
    manages = found[group.manager_agent_id].managed_group_id
    if manages is not None and (current is None or manages != current.id):
        raise Conflict(f"agent {group.manager_agent_id} already manages group {manages}")


async def get_group(conn: AsyncConnection, org_id: str, group_id: str) -> Group:
    """The group, or NotFound (also for another organization's)."""
    found = await group_store.get_groups(conn, org_id, [group_id])
    if group_id not in found:
        raise NotFound(f"group {group_id} not found")
    return found[group_id]


async def list_groups(
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    manager_type: ManagerType | None = None,
    show_hidden: bool = False,
) -> list[Group]:
    """A page of the organization's groups, in the page's order; hidden ones only with ``show_hidden``."""
    ids = await group_store.list_group_ids(conn, org_id, page, manager_type=manager_type, show_hidden=show_hidden)
    found = await group_store.get_groups(conn, org_id, ids)
    return [found[i] for i in ids if i in found]


async def update_group(
    conn: AsyncConnection, org_id: str, group_id: str, changes: GroupChanges, *, now: datetime
) -> Group:
    """Apply ``changes`` to the group (same checks as ``create_group``)."""
    group = await get_group(conn, org_id, group_id)
    fields = set_fields(changes)
    for name in ("agent_ids", "shared_block_ids"):
        if name in fields:
            fields[name] = tuple(dict.fromkeys(fields[name]))
    check_frequency(fields.get("sleeptime_agent_frequency"))
    updated = replace(group, **fields)
    await _check_members(conn, updated, current=group)
    updated = replace(updated, updated_at=now)
    await group_store.update_group(conn, updated)
    return updated


async def delete_group(conn: AsyncConnection, org_id: str, group_id: str, *, now: datetime) -> None:
    """Delete the group; its agents stay, and its main agent has no sleep-time agent any more."""
    await get_group(conn, org_id, group_id)
    await group_store.delete_groups(conn, [group_id], now)


async def group_messages(conn: AsyncConnection, org_id: str, group_id: str, page: Page) -> list[Message]:
    """A page of the group's conversation: its main agent's messages, in the page's order.

    As Letta's: the sleep-time agents' own messages (the transcripts they were given, their
    memory edits) are theirs, listed with their agent, not the group's.
    """
    group = await get_group(conn, org_id, group_id)
    if group.manager_agent_id is None:
        return []
    return await message_store.list_agent_messages(conn, group.manager_agent_id, page)


async def run_due(
    engine: AsyncEngine,
    clock: Clock,
    org_id: str,
    *,
    everything: bool = False,
    max_steps: int = 10,
    queued: asyncio.Event | None = None,
) -> list[BatchRunView]:
    """Step the organization's due sleep-time agents now, as batch runs (``everything``: every one
    whose main agent said anything since its last run). Returns the runs queued; ``queued`` (the
    poller's event on this loop, if any) is set when there is one."""
    runs = await sleeptime.gather(engine, clock, org_id=org_id, everything=everything, max_steps=max_steps)
    if runs and queued is not None:
        queued.set()
    async with engine.connect() as conn:
        return await views_of(conn, runs)
