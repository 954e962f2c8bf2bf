"""Sleep-time groups: their rows, their agents, and the turn counting that makes them due.

A group's main agent is the agent whose ``managed_group_id`` names it (one spelling of the link);
its sleep-time agents are its ``group_agents``. Every function costs a fixed number of statements
whatever the number of groups.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, bindparam, case, delete, exists, func, insert, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.groups import Group, ManagerType
from nightshift.store.bulk import in_ids
from nightshift.store.mapping import from_row, row_writer
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import agents, group_agents, groups, messages

_values = row_writer(Group, groups, shared_block_ids=list)


async def insert_groups(conn: AsyncConnection, new: Sequence[Group]) -> None:
    """Insert groups with their agents, and make each one's ``manager_agent_id`` its manager."""
    if not new:
        return
    await conn.execute(insert(groups), [_values(g) for g in new])
    await _link(conn, new)


async def _link(conn: AsyncConnection, linked: Sequence[Group]) -> None:
    rows = [{"group_id": g.id, "agent_id": a, "position": i} for g in linked for i, a in enumerate(g.agent_ids)]
    if rows:
        await conn.execute(insert(group_agents), rows)
    # The agent's row moves on with its link (``updated_at``), so that a step in flight for it
    # reads it again before it writes (``agents.reload_changed``) and counts its turn.
    managers = [{"agent": g.manager_agent_id, "group": g.id, "at": g.updated_at} for g in linked if g.manager_agent_id]
    if managers:
        await conn.execute(
            update(agents)
            .where(agents.c.id == bindparam("agent"))
            .values(managed_group_id=bindparam("group"), updated_at=bindparam("at")),
            managers,
        )


async def update_group(conn: AsyncConnection, group: Group) -> None:
    """Store the group's fields and links as they are in ``group``."""
    values = {k: v for k, v in _values(group).items() if k not in ("id", "organization_id", "created_at")}
    await conn.execute(update(groups).where(groups.c.id == group.id).values(values))
    await conn.execute(delete(group_agents).where(group_agents.c.group_id == group.id))
    unlinked = update(agents).where(agents.c.managed_group_id == group.id)
    await conn.execute(unlinked.values(managed_group_id=None, updated_at=group.updated_at))
    await _link(conn, [group])


async def delete_groups(conn: AsyncConnection, group_ids: Sequence[str], now: datetime) -> None:
    """Delete the groups (their agents stay); their main agents manage nothing any more from ``now``."""
    if not group_ids:
        return
    ids = list(group_ids)
    unlinked = update(agents).where(in_ids(conn, agents.c.managed_group_id, ids))
    await conn.execute(unlinked.values(managed_group_id=None, updated_at=now))
    await conn.execute(delete(groups).where(in_ids(conn, groups.c.id, ids)))


async def get_groups(conn: AsyncConnection, org_id: str, ids: Iterable[str]) -> dict[str, Group]:
    """The groups of ``org_id`` among ``ids``, with their agents, by id (three statements)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    query = select(groups).where(groups.c.organization_id == org_id, in_ids(conn, groups.c.id, wanted))
    return await _with_links(conn, list(await conn.execute(query)))


async def _with_links(conn: AsyncConnection, rows: Sequence[Row[Any]]) -> dict[str, Group]:
    if not rows:
        return {}
    ids = [row.id for row in rows]
    members: dict[str, list[str]] = defaultdict(list)
    query = (
        select(group_agents.c.group_id, group_agents.c.agent_id)
        .where(in_ids(conn, group_agents.c.group_id, ids))
        .order_by(group_agents.c.group_id, group_agents.c.position)
    )
    for group_id, agent_id in await conn.execute(query):
        members[group_id].append(agent_id)
    managers = {
        row.managed_group_id: row.id
        for row in await conn.execute(
            select(agents.c.id, agents.c.managed_group_id).where(in_ids(conn, agents.c.managed_group_id, ids))
        )
    }
    return {
        row.id: replace(
            from_row(Group, row, manager_type=ManagerType, shared_block_ids=tuple),
            agent_ids=tuple(members[row.id]),
            manager_agent_id=managers.get(row.id),
        )
        for row in rows
    }


async def list_group_ids(
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    manager_type: ManagerType | None = None,
    show_hidden: bool = False,
) -> list[str]:
    """Ids of a page of the organization's groups (of one manager type, if given; hidden ones
    only with ``show_hidden``)."""
    query = select(groups.c.id).where(groups.c.organization_id == org_id)
    if manager_type is not None:
        query = query.where(groups.c.manager_type == manager_type.value)
    if not show_hidden:
        query = query.where(or_(groups.c.hidden.is_(None), groups.c.hidden.is_(False)))
    return [row[0] for row in await conn.execute(paginate(query, groups.c.id, page))]


async def groups_with_agents(conn: AsyncConnection, agent_ids: Sequence[str]) -> set[str]:
    """The groups that any of ``agent_ids`` belongs to, as a sleep-time agent or as its manager."""
    if not agent_ids:
        return set()
    ids = list(agent_ids)
    members = select(group_agents.c.group_id).where(in_ids(conn, group_agents.c.agent_id, ids))
    managed = select(agents.c.managed_group_id).where(
        in_ids(conn, agents.c.id, ids), agents.c.managed_group_id.is_not(None)
    )
    return {row[0] for row in await conn.execute(members.union(managed))}


async def count_turns(conn: AsyncConnection, agent_ids: Sequence[str], now: datetime) -> None:
    """One finished turn for each of ``agent_ids`` that manages a group: its counter moves on, and a
    turn that reaches its frequency makes the group due (since ``now``, or since it was already).

    One statement, in the transaction that writes the turn: a turn is counted once with it.
    """
    if not agent_ids:
        return
    turns = groups.c.turns_counter + 1
    frequency = groups.c.sleeptime_agent_frequency
    reached = or_(frequency.is_(None), frequency <= 1, turns % frequency == 0)
    managed = select(agents.c.managed_group_id).where(
        in_ids(conn, agents.c.id, list(agent_ids)), agents.c.managed_group_id.is_not(None)
    )
    await conn.execute(
        update(groups)
        .where(groups.c.id.in_(managed))
        .values(
            turns_counter=turns,
            due_since=case(
                (and_(reached, groups.c.due_since.is_(None)), literal(now, groups.c.due_since.type)),
                else_=groups.c.due_since,
            ),
            updated_at=now,
        )
    )


# Read by every pass of a poller, idle or not: built once.
_DUE_SUMMARY = select(func.count(), func.min(groups.c.due_since)).where(groups.c.due_since.is_not(None))


async def due_summary(conn: AsyncConnection) -> tuple[int, datetime | None]:
    """How many groups are due, and since when the oldest is (one read of the due index)."""
    row = (await conn.execute(_DUE_SUMMARY)).one()
    return int(row[0]), row[1]


async def claim_due(conn: AsyncConnection, *, org_id: str | None = None, limit: int) -> list[Group]:
    """Up to ``limit`` due groups, oldest due first, locked until the transaction ends; another
    poller skips them (PostgreSQL; SQLite serialises writers anyway)."""
    query = select(groups).where(groups.c.due_since.is_not(None)).order_by(groups.c.due_since, groups.c.id).limit(limit)
    if org_id is not None:
        query = query.where(groups.c.organization_id == org_id)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return list((await _with_links(conn, list(await conn.execute(query)))).values())


async def make_due_with_news(conn: AsyncConnection, org_id: str, now: datetime) -> int:
    """Make due every group of ``org_id`` whose main agent said anything since its sleep-time
    agents' last run (``nightshift sleeptime run --all``); returns how many became due."""
    news = exists(
        select(messages.c.id)
        .select_from(messages.join(agents, agents.c.id == messages.c.agent_id))
        .where(
            agents.c.managed_group_id == groups.c.id,
            messages.c.role != "system",
            or_(
                groups.c.last_processed_message_id.is_(None),
                messages.c.id > groups.c.last_processed_message_id,
            ),
        )
    )
    result = await conn.execute(
        update(groups)
        .where(groups.c.organization_id == org_id, groups.c.due_since.is_(None), news)
        .values(due_since=now, updated_at=now)
    )
    return result.rowcount or 0


async def mark_gathered(conn: AsyncConnection, last_messages: Mapping[str, str | None], now: datetime) -> None:
    """The groups' sleep-time agents were given the main agent's messages up to the one named
    (None: no new message): no longer due, and their next transcript starts after it."""
    if not last_messages:
        return
    rows = [{"group": g, "last": m} for g, m in last_messages.items()]
    await conn.execute(
        update(groups)
        .where(groups.c.id == bindparam("group"))
        .values(
            due_since=None,
            last_processed_message_id=func.coalesce(bindparam("last"), groups.c.last_processed_message_id),
            updated_at=now,
        ),
        rows,
    )
