"""Agents with their tags, blocks and tools, loaded and written in bulk.

Every function costs a fixed number of statements whatever the number of agents.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import (
    Select,
    String,
    bindparam,
    cast,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agents import Agent, AgentType, LLMConfig
from nightshift.domain.blocks import Block
from nightshift.domain.tool_rules import dump_tool_rules, parse_tool_rules
from nightshift.store.blocks import agent_block
from nightshift.store.bulk import bound_ids, in_bound, in_ids
from nightshift.store.copy import execute_rows
from nightshift.store.groups import get_groups
from nightshift.store.mapping import row_reader, row_writer
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import agent_blocks, agent_tags, agent_tools, agents, blocks, deleted_agents, tools
from nightshift.store.tools import to_tool


def _llm_config_json(config: LLMConfig) -> dict[str, Any]:
    return {
        "provider": config.provider,
        "model": config.model,
        "context_window": config.context_window,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "parallel_tool_calls": config.parallel_tool_calls,
    }


def _to_llm_config(data: dict[str, Any]) -> LLMConfig:
    return LLMConfig(
        provider=data["provider"],
        model=data["model"],
        context_window=data["context_window"],
        max_tokens=data["max_tokens"],
        temperature=data.get("temperature"),
        # Agents stored before the setting existed take its default.
        parallel_tool_calls=data.get("parallel_tool_calls", True),
    )


_row_values = row_writer(
    Agent, agents, llm_config=_llm_config_json, tool_rules=dump_tool_rules, message_ids=list, secrets=dict
)


# What ``update_agents`` writes: every stored field but the agent's identity and birth.
_UPDATED_COLUMNS = tuple(
    column.name
    for column in agents.columns
    if column.name in {f.name for f in fields(Agent)} and column.name not in {"id", "organization_id", "created_at"}
)


# An agent from a row of ``agents``' columns (in the table's order) followed by its tags and tool
# links, given its blocks, its tools and its tags (read by position, see ``row_reader``).
_to_agent = row_reader(
    Agent,
    agents,
    after=2,
    given=("blocks", "tools", "tags", "group"),
    llm_config=_to_llm_config,
    tool_rules=parse_tool_rules,
    message_ids=tuple,
    agent_type=AgentType,
)


# Where a row of ``agents``' columns holds the group the agent manages.
_MANAGED = [column.name for column in agents.columns].index("managed_group_id")


async def insert_agents(conn: AsyncConnection, new: Sequence[Agent]) -> None:
    """Insert agents with their tags and block and tool links (their blocks and tools must exist)."""
    if not new:
        return
    await conn.execute(insert(agents), [_row_values(a) for a in new])
    tag_rows = [{"agent_id": a.id, "tag": t} for a in new for t in a.tags]
    if tag_rows:
        await conn.execute(insert(agent_tags), tag_rows)
    block_rows = [
        {"agent_id": a.id, "block_id": b.id, "label": b.label, "position": i}
        for a in new
        for i, b in enumerate(a.blocks)
    ]
    if block_rows:
        await conn.execute(insert(agent_blocks), block_rows)
    tool_rows = [{"agent_id": a.id, "tool_id": t.id, "position": i} for a in new for i, t in enumerate(a.tools)]
    if tool_rows:
        await conn.execute(insert(agent_tools), tool_rows)


async def load_agents(conn: AsyncConnection, org_id: str, ids: Sequence[str]) -> dict[str, Agent]:
    """The agents of ``org_id`` among ``ids``, fully loaded, keyed by id (missing ids are absent).

    Three statements: the agents with their tags and tool links (one row each), their blocks, and
    the tools they use (each tool once: every agent has the base tools); three more when some of
    them manage a group (``store.groups.get_groups``). Each statement costs a
    round trip (on SQLite, a hop to its thread and back), which is most of what reading one agent
    costs.
    """
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    agent_query, block_query, tool_query = _load_statements(conn.dialect.name)
    # Each row: the agent's columns, then its tags and tool links (read by position, see _to_agent).
    rows = list(await conn.execute(agent_query, {"org_id": org_id, "ids": bound_ids(conn, wanted)}))
    if not rows:
        return {}
    block_map: dict[str, list[Block]] = defaultdict(list)
    for row in await conn.execute(block_query, {"ids": bound_ids(conn, [row[0] for row in rows])}):
        block_map[row[0]].append(agent_block(row))  # (the agent id, then the block)
    links = {row[0]: _ordered_tool_ids(row[-1]) for row in rows}
    tool_ids = {tool_id for ids_ in links.values() for tool_id in ids_}
    by_id = {row.id: to_tool(row) for row in await conn.execute(tool_query, {"ids": bound_ids(conn, tool_ids)})}
    # Agents with the same links share one tuple of their tools (less to hold, and to compare).
    tool_lists = {ids_: tuple(by_id[i] for i in ids_) for ids_ in set(links.values())}
    # The groups they manage (sleep-time agents'): no statement when none manages one.
    managed = [row[_MANAGED] for row in rows if row[_MANAGED] is not None]
    groups = await get_groups(conn, org_id, managed) if managed else {}
    return {
        row[0]: _to_agent(
            row,
            tuple(block_map[row[0]]),
            tool_lists[links[row[0]]],
            tuple(sorted(_tag_list(row[-2]))),
            groups.get(row[_MANAGED]) if row[_MANAGED] is not None else None,
        )
        for row in rows
    }


@functools.cache
def _load_statements(dialect: str) -> tuple[Select[Any], Select[Any], Select[Any]]:
    """``load_agents``'s three statements for a dialect, built once (parameters ``org_id``, ``ids``)."""
    agent_query = select(
        agents, _tags_of_agent(dialect).label("tag_list"), _tool_links_of_agent().label("tool_links")
    ).where(agents.c.organization_id == bindparam("org_id"), in_bound(dialect, agents.c.id, "ids"))
    block_query = (
        select(agent_blocks.c.agent_id, blocks)
        .join(blocks, blocks.c.id == agent_blocks.c.block_id)
        .where(in_bound(dialect, agent_blocks.c.agent_id, "ids"))
        .order_by(agent_blocks.c.agent_id, agent_blocks.c.position)
    )
    tool_query = select(tools).where(in_bound(dialect, tools.c.id, "ids"))
    return agent_query, block_query, tool_query


async def llm_configs_of(conn: AsyncConnection, org_id: str, ids: Sequence[str]) -> dict[str, LLMConfig]:
    """The LLM config of each agent of ``org_id`` among ``ids`` (missing ids are absent), reading
    nothing else of them."""
    query = select(agents.c.id, agents.c.llm_config).where(
        agents.c.organization_id == org_id, in_ids(conn, agents.c.id, list(dict.fromkeys(ids)))
    )
    return {row.id: _to_llm_config(row.llm_config) for row in await conn.execute(query)}


async def providers_of(conn: AsyncConnection, org_id: str, ids: Sequence[str]) -> dict[str, str]:
    """The provider of each agent of ``org_id`` among ``ids`` (missing ids are absent), read from
    its LLM config in the database: nothing else of it is read or parsed."""
    provider = agents.c.llm_config["provider"].as_string()
    query = select(agents.c.id, provider).where(
        agents.c.organization_id == org_id, in_ids(conn, agents.c.id, list(dict.fromkeys(ids)))
    )
    return {str(agent_id): str(name) for agent_id, name in await conn.execute(query)}


async def agent_exists(conn: AsyncConnection, org_id: str, agent_id: str) -> bool:
    """Whether ``org_id`` has an agent of that id, in one statement (nothing of it is loaded)."""
    found = await conn.scalar(select(agents.c.id).where(agents.c.organization_id == org_id, agents.c.id == agent_id))
    return found is not None


def _tags_of_agent(dialect: str) -> Any:
    """The agent's tags as a JSON array, read with its row (a correlated subquery on the tags' key)."""
    tag_array = func.json_agg if dialect == "postgresql" else func.json_group_array
    return select(tag_array(agent_tags.c.tag)).where(agent_tags.c.agent_id == agents.c.id).scalar_subquery()


def _tag_list(value: Any) -> list[str]:
    if value is None:  # PostgreSQL's json_agg of no rows
        return []
    return list(orjson.loads(value)) if isinstance(value, str | bytes) else list(value)


def _tool_links_of_agent() -> Any:
    """The agent's tool ids with their positions (``tool:position,...``), read with its row: agents
    have ten tools or so, and reading rows is what loading agents spends most on."""
    pairs = agent_tools.c.tool_id + ":" + cast(agent_tools.c.position, String)
    return select(func.aggregate_strings(pairs, ",")).where(agent_tools.c.agent_id == agents.c.id).scalar_subquery()


# Agents made alike link the same tools at the same positions (every agent has the base tools):
# their links read back as the same text, put in order once.
@functools.lru_cache(maxsize=1024)
def _ordered_tool_ids(joined: str | None) -> tuple[str, ...]:
    if not joined:
        return ()
    split = (pair.rpartition(":") for pair in joined.split(","))
    return tuple(tool_id for _, tool_id in sorted((int(position), tool_id) for tool_id, _, position in split))


async def reload_changed(conn: AsyncConnection, org_id: str, loaded: Mapping[str, Agent]) -> dict[str, Agent]:
    """``loaded`` as stored now: the agents that changed since they were read are read again
    (see ``unchanged``). Deleted agents are absent from the result."""
    same, stale = await unchanged(conn, org_id, loaded)
    return same | await load_agents(conn, org_id, stale)


async def unchanged(
    conn: AsyncConnection, org_id: str, loaded: Mapping[str, Agent]
) -> tuple[dict[str, Agent], list[str]]:
    """The agents of ``loaded`` still as stored, and the ids of those that changed since they were
    read (deleted ones are in neither), in two statements whatever their number.

    Every write to an agent's row (its fields, links or context window) moves its ``updated_at``,
    every edit of a block or a tool moves the block's or the tool's: two narrow queries compare them
    with what was read, so a step's write does not load every agent twice when (as usual) none
    changed meanwhile. (The group an agent manages is not compared: see ``store/agent_cache.py``.)
    """
    if not loaded:
        return {}, []
    query = (
        select(agents.c.id, agents.c.updated_at, func.max(blocks.c.updated_at), func.count(blocks.c.id))
        .select_from(
            agents.outerjoin(agent_blocks, agent_blocks.c.agent_id == agents.c.id).outerjoin(
                blocks, blocks.c.id == agent_blocks.c.block_id
            )
        )
        .where(agents.c.organization_id == org_id, in_ids(conn, agents.c.id, list(loaded)))
        .group_by(agents.c.id, agents.c.updated_at)
    )
    current = {row[0]: (row[1], row[2], row[3]) for row in await conn.execute(query)}
    changed_tools = await _changed_tools(conn, org_id, loaded.values())
    same: dict[str, Agent] = {}
    for agent_id, agent in loaded.items():
        last_block_edit = max((b.updated_at for b in agent.blocks), default=None)
        if current.get(agent_id) == (agent.updated_at, last_block_edit, len(agent.blocks)) and not (
            changed_tools and any(t.id in changed_tools for t in agent.tools)
        ):
            same[agent_id] = agent
    return same, [agent_id for agent_id in current if agent_id not in same]


async def _changed_tools(conn: AsyncConnection, org_id: str, loaded: Iterable[Agent]) -> set[str]:
    """The ids of the tools of ``loaded`` edited or deleted since they were read (one statement;
    agents loaded together share their tool lists, see ``load_agents``)."""
    read: dict[str, datetime] = {}
    for tool_list in {id(a.tools): a.tools for a in loaded}.values():
        read.update((t.id, t.updated_at) for t in tool_list)
    if not read:
        return set()
    query = select(tools.c.id, tools.c.updated_at).where(
        tools.c.organization_id == org_id, in_ids(conn, tools.c.id, list(read))
    )
    current = dict(tuple(row) for row in await conn.execute(query))
    return {tool_id for tool_id, at in read.items() if current.get(tool_id) != at}


async def list_agent_ids(
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    name: str | None = None,
    tags: Sequence[str] = (),
    match_all_tags: bool = False,
    query_text: str | None = None,
) -> list[str]:
    """Ids of a page of the organization's agents, filtered by exact name, by a part of the name
    (``query_text``, any case) and by tags."""
    query = select(agents.c.id).where(agents.c.organization_id == org_id)
    if name is not None:
        query = query.where(agents.c.name == name)
    if query_text:
        query = query.where(func.lower(agents.c.name).contains(query_text.lower(), autoescape=True))
    if tags:
        tagged = select(agent_tags.c.agent_id).where(agent_tags.c.tag.in_(list(tags))).group_by(agent_tags.c.agent_id)
        if match_all_tags:
            tagged = tagged.having(func.count(func.distinct(agent_tags.c.tag)) == len(set(tags)))
        query = query.where(agents.c.id.in_(tagged))
    return [str(i) for i in await conn.scalars(paginate(query, agents.c.id, page))]


async def update_agents(conn: AsyncConnection, changed: Sequence[Agent]) -> None:
    """Store the scalar fields and the in-context window of many agents (links are set apart)."""
    if not changed:
        return
    columns = _UPDATED_COLUMNS
    statement = update(agents).where(agents.c.id == bindparam("a_id")).values({c: bindparam(c) for c in columns})
    rows = []
    for agent in changed:
        values = _row_values(agent)
        rows.append({"a_id": agent.id, **{c: values[c] for c in columns}})
    await execute_rows(conn, statement, rows)


async def set_links(conn: AsyncConnection, agent: Agent) -> None:
    """Make the stored tags, block links and tool links of ``agent`` match the object."""
    await conn.execute(delete(agent_tags).where(agent_tags.c.agent_id == agent.id))
    await conn.execute(delete(agent_blocks).where(agent_blocks.c.agent_id == agent.id))
    await conn.execute(delete(agent_tools).where(agent_tools.c.agent_id == agent.id))
    if agent.tags:
        await conn.execute(insert(agent_tags), [{"agent_id": agent.id, "tag": t} for t in agent.tags])
    if agent.blocks:
        await conn.execute(
            insert(agent_blocks),
            [
                {"agent_id": agent.id, "block_id": b.id, "label": b.label, "position": i}
                for i, b in enumerate(agent.blocks)
            ],
        )
    if agent.tools:
        await conn.execute(
            insert(agent_tools),
            [{"agent_id": agent.id, "tool_id": t.id, "position": i} for i, t in enumerate(agent.tools)],
        )


async def delete_agent(conn: AsyncConnection, org_id: str, agent_id: str, now: datetime) -> bool:
    """Delete an agent with its messages and passages, and the blocks made with an agent that no
    other agent uses (a standalone block stays); False when there was none.

    Its batch items stay, for the record of its runs, and its name is kept in ``deleted_agents``.
    """
    name = await conn.scalar(select(agents.c.name).where(agents.c.organization_id == org_id, agents.c.id == agent_id))
    if name is None:
        return False
    own_blocks = list(await conn.scalars(select(agent_blocks.c.block_id).where(agent_blocks.c.agent_id == agent_id)))
    # An id seen deleted before (an agent file imported again with its ids) holds the latest name.
    await conn.execute(delete(deleted_agents).where(deleted_agents.c.id == agent_id))
    await conn.execute(insert(deleted_agents).values(id=agent_id, organization_id=org_id, name=name, deleted_at=now))
    await conn.execute(delete(agents).where(agents.c.organization_id == org_id, agents.c.id == agent_id))
    if own_blocks:
        still_used = select(agent_blocks.c.block_id).where(agent_blocks.c.block_id.in_(own_blocks))
        await conn.execute(
            delete(blocks).where(
                blocks.c.id.in_(own_blocks), blocks.c.standalone.is_(False), blocks.c.id.not_in(still_used)
            )
        )
    return True


async def set_windows(conn: AsyncConnection, changed: Sequence[Agent], now: datetime) -> None:
    """Store the in-context windows of many agents, with their sizes, in one statement."""
    if not changed:
        return
    await execute_rows(
        conn,
        update(agents)
        .where(agents.c.id == bindparam("a_id"))
        .values(message_ids=bindparam("ids"), context_tokens=bindparam("tokens"), updated_at=bindparam("now")),
        [{"a_id": a.id, "ids": list(a.message_ids), "tokens": a.context_tokens, "now": now} for a in changed],
    )


async def hold_for_sync_step(
    conn: AsyncConnection, agent_id: str, now: datetime, until: datetime, *, run_id: str | None = None
) -> bool:
    """Mark the agent as stepping synchronously (for the agent run ``run_id``) until ``until``;
    False when another step holds it."""
    result = await conn.execute(
        update(agents)
        .where(agents.c.id == agent_id, or_(agents.c.stepping_until.is_(None), agents.c.stepping_until < now))
        .values(stepping_until=until, stepping_run_id=run_id)
    )
    return result.rowcount > 0


async def release_sync_step(conn: AsyncConnection, agent_id: str, run_id: str | None) -> None:
    """The synchronous step of the agent run ``run_id`` is over: its hold goes, if it still holds
    the agent (a cancel lets go of it at once, and a later run may hold the agent since). ``None``:
    a hold of no run's (a batch run's answers to approval requests, applied as its request arrives)."""
    await conn.execute(
        update(agents)
        .where(agents.c.id == agent_id, or_(agents.c.stepping_run_id == run_id, agents.c.stepping_run_id.is_(None)))
        .values(stepping_until=None, stepping_run_id=None)
    )


async def release_holds_of_runs(conn: AsyncConnection, agent_id: str, run_ids: Sequence[str]) -> None:
    """Let go of the agent if one of these agent runs (just cancelled) holds it."""
    if run_ids:
        await conn.execute(
            update(agents)
            .where(agents.c.id == agent_id, agents.c.stepping_run_id.in_(list(run_ids)))
            .values(stepping_until=None, stepping_run_id=None)
        )


async def lock_agents(conn: AsyncConnection, agent_ids: Sequence[str]) -> None:
    """Lock the agents' rows until the transaction ends (PostgreSQL; SQLite serialises writers).

    Starting a step takes this lock before checking whether an agent is already stepping, so two
    steps that start at once for one agent are serialised and the second sees the first.
    """
    if conn.dialect.name == "postgresql":
        await conn.execute(select(agents.c.id).where(in_ids(conn, agents.c.id, agent_ids)).with_for_update())


async def agents_stepping(conn: AsyncConnection, agent_ids: Sequence[str], now: datetime) -> set[str]:
    """Which of these agents are held by a synchronous step right now."""
    query = select(agents.c.id).where(in_ids(conn, agents.c.id, agent_ids), agents.c.stepping_until > now)
    return {str(i) for i in await conn.scalars(query)}


async def list_tags(
    conn: AsyncConnection,
    org_id: str,
    *,
    after: str | None,
    before: str | None,
    limit: int,
    descending: bool,
    containing: str | None,
) -> list[str]:
    """A page of the distinct tags of the organization's agents, in alphabetical order (or reversed), in
    one statement. ``after`` / ``before`` are tags, taken in the listing's order (``before``
    alone: the ``limit`` tags just before it, as :func:`~nightshift.store.pagination.paginate`
    gives them); ``containing`` keeps the tags holding that text, in any case."""
    tag = agent_tags.c.tag
    query = (
        select(tag)
        .distinct()
        .select_from(agent_tags.join(agents, agents.c.id == agent_tags.c.agent_id))
        .where(agents.c.organization_id == org_id)
    )
    if containing:
        query = query.where(func.lower(tag).contains(containing.lower(), autoescape=True))
    if after is not None:
        query = query.where(tag < after if descending else tag > after)
    if before is not None:
        query = query.where(tag > before if descending else tag < before)
    walk_back = before is not None and after is None
    query = query.order_by(tag.desc() if descending != walk_back else tag.asc()).limit(limit)
    found = [str(t) for t in await conn.scalars(query)]
    return found[::-1] if walk_back else found
