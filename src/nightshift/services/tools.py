"""Creating, updating and finding tools; keeping each organization's base tools in place."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.domain.pagination import Page
from nightshift.domain.tool_rules import parse_tool_rules
from nightshift.domain.tools import Tool, ToolType
from nightshift.domain.unset import UNSET, Maybe
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.ids import new_id
from nightshift.providers.registry import provider_info
from nightshift.runtime.run_tool import ToolRun, run_agent_tool
from nightshift.store import tools as tool_store
from nightshift.tools.base import BASE_TOOLS
from nightshift.tools.reading import DEFAULT_READ_SECONDS, read_tool
from nightshift.tools.sandbox import Sandbox
from nightshift.tools.schema import schema_from_function


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolChanges:
    """What an update changes on a tool: every field left UNSET stays as it is.

    New ``source_code`` regenerates the schema and the description (a ``description`` given too
    wins over the docstring's).
    """

    source_code: Maybe[str] = UNSET
    description: Maybe[str] = UNSET
    tags: Maybe[Sequence[str]] = UNSET
    return_char_limit: Maybe[int] = UNSET
    default_requires_approval: Maybe[bool] = UNSET


def _base_tool(org_id: str, name: str, now: datetime) -> Tool:
    function, tool_type = BASE_TOOLS[name]
    schema = schema_from_function(function)
    return Tool(
        id=new_id("tool"),
        organization_id=org_id,
        name=name,
        description=schema.description,
        json_schema=schema.json_schema,
        tool_type=tool_type,
        created_at=now,
        updated_at=now,
    )


async def ensure_base_tools(conn: AsyncConnection, org_id: str, *, now: datetime) -> dict[str, Tool]:
    """The organization's base tools by name, created (at ``now``) on first use."""
    existing = {t.name: t for t in await tool_store.get_tools_by_name(conn, org_id, BASE_TOOLS)}
    if len(existing) == len(BASE_TOOLS):
        return existing
    # Another request may be creating them right now: insert what is missing, then read back.
    await tool_store.insert_tools_if_absent(
        conn, [_base_tool(org_id, name, now) for name in BASE_TOOLS if name not in existing]
    )
    return {t.name: t for t in await tool_store.get_tools_by_name(conn, org_id, BASE_TOOLS)}


async def create_tool(
    conn: AsyncConnection,
    org_id: str,
    *,
    now: datetime,
    source_code: str,
    description: str | None = None,
    tags: Sequence[str] = (),
    return_char_limit: int = 50_000,
    json_schema: dict[str, Any] | None = None,
    args_json_schema: dict[str, Any] | None = None,
    default_requires_approval: bool = False,
    upsert: bool = False,
    read_seconds: float = DEFAULT_READ_SECONDS,
) -> Tool:
    """A custom tool from Python source; its schema comes from the function's signature and docstring.

    With ``args_json_schema`` (a pydantic model's schema) the parameters come from the model
    instead, and the function gets model instances (see ``tools.models``). A client's
    ``json_schema`` replaces either. The source and the schemas are read in a child process that
    gets ``read_seconds`` at most (``tools/reading.py``).

    Raises:
        InvalidInput: the source does not give a usable function, or took too long to read.
        Conflict: a tool with that name exists (unless ``upsert``, which replaces it).
    """
    read = await read_tool(
        source_code, args_json_schema=args_json_schema, json_schema=json_schema, seconds=read_seconds
    )
    schema = read.schema
    name = schema.name
    if name in BASE_TOOLS:
        raise Conflict(f"{name!r} is a base tool name; pick another function name")
    final_schema = read.client_schema if read.client_schema is not None else dict(schema.json_schema)
    final_description = description or final_schema.get("description") or schema.description
    if not final_description:
        raise InvalidInput(
            f"tool {name!r} has no description: give one, or a docstring to the function", field="description"
        )
    final_schema["description"] = final_description
    final_schema["name"] = name  # the model calls the tool by the function's name
    existing = await tool_store.get_tools_by_name(conn, org_id, [name])
    if existing:
        if not upsert:
            raise Conflict(f"a tool named {name!r} already exists (id {existing[0].id})")
        tool = replace(
            existing[0],
            description=final_description,
            json_schema=final_schema,
            source_code=source_code,
            args_json_schema=args_json_schema or None,
            tags=tuple(tags),
            return_char_limit=return_char_limit,
            default_requires_approval=default_requires_approval,
            updated_at=now,
        )
        check_tools_fit([tool], await tool_store.providers_of_agents_using(conn, tool.id))
        await tool_store.update_tool(conn, tool)
        return tool
    tool = Tool(
        id=new_id("tool"),
        organization_id=org_id,
        name=name,
        description=final_description,
        json_schema=final_schema,
        tool_type=ToolType.CUSTOM,
        source_code=source_code,
        args_json_schema=args_json_schema or None,
        tags=tuple(tags),
        return_char_limit=return_char_limit,
        default_requires_approval=default_requires_approval,
        created_at=now,
        updated_at=now,
    )
    await tool_store.insert_tools(conn, [tool])
    return tool


def check_tools_fit(tools: Iterable[Tool], providers: Iterable[str]) -> None:
    """Refuse a tool some of ``providers`` cannot be given (Gemini takes a subset of JSON Schema):
    when a tool meets an agent of such a provider, not when a step is sent.

    Raises:
        InvalidInput: names the tool, the provider and what in the schema it cannot take.
    """
    for name in sorted(set(providers)):
        problem_of = provider_info(name).tool_problem
        if problem_of is None:
            continue
        for tool in {t.id: t for t in tools}.values():
            problem = problem_of(tool.json_schema.get("parameters"))
            if problem is not None:
                raise InvalidInput(f"tool {tool.name!r} cannot be given to {name} agents: {problem}", field="tools")


async def list_tools(
    conn: AsyncConnection, org_id: str, page: Page, *, now: datetime, name: str | None = None
) -> list[Tool]:
    """A page of the organization's tools; its base tools are created first (at ``now``), so that they are listed."""
    await ensure_base_tools(conn, org_id, now=now)
    return await tool_store.list_tools(conn, org_id, page, name=name)


async def run_tool(
    engine: AsyncEngine,
    sandbox: Sandbox,
    org_id: str,
    agent_id: str,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    now: datetime,
) -> ToolRun:
    """Run one of the agent's tools now, outside any step: see :func:`nightshift.runtime.run_tool.run_agent_tool`."""
    return await run_agent_tool(engine, sandbox, org_id, agent_id, tool_name, arguments, now=now)


async def get_tool(conn: AsyncConnection, org_id: str, tool_id: str) -> Tool:
    """The tool, or NotFound."""
    found = await tool_store.get_tools(conn, org_id, [tool_id])
    if not found:
        raise NotFound(f"tool {tool_id} not found")
    return found[0]


async def update_tool(
    conn: AsyncConnection,
    org_id: str,
    tool_id: str,
    changes: ToolChanges,
    *,
    now: datetime,
    read_seconds: float = DEFAULT_READ_SECONDS,
) -> Tool:
    """Change a custom tool; new source code regenerates its schema (and may not rename it).

    New source is read in a child process that gets ``read_seconds`` at most (``tools/reading.py``).
    """
    tool = await get_tool(conn, org_id, tool_id)
    if changes.source_code is UNSET:
        updated = tool
    elif tool.tool_type is not ToolType.CUSTOM:
        raise InvalidInput(f"{tool.name!r} is a base tool; its source cannot change", field="source_code")
    else:
        updated = await _with_source(tool, changes.source_code, read_seconds)
    if changes.description is not UNSET:
        json_schema = {**updated.json_schema, "description": changes.description}
        updated = replace(updated, description=changes.description, json_schema=json_schema)
    if changes.tags is not UNSET:
        updated = replace(updated, tags=tuple(changes.tags))
    if changes.return_char_limit is not UNSET:
        updated = replace(updated, return_char_limit=changes.return_char_limit)
    if changes.default_requires_approval is not UNSET:
        updated = replace(updated, default_requires_approval=changes.default_requires_approval)
    updated = replace(updated, updated_at=now)
    if updated.json_schema != tool.json_schema:
        check_tools_fit([updated], await tool_store.providers_of_agents_using(conn, tool.id))
    await tool_store.update_tool(conn, updated)
    return updated


async def _with_source(tool: Tool, source_code: str, read_seconds: float) -> Tool:
    """The tool with new source, and the schema and description read from it (under the same name)."""
    schema = (await read_tool(source_code, args_json_schema=tool.args_json_schema, seconds=read_seconds)).schema
    if schema.name != tool.name:
        raise InvalidInput(
            f"the function is named {schema.name!r} but the tool is {tool.name!r}; create a new tool to rename",
            field="source_code",
        )
    return replace(tool, source_code=source_code, json_schema=schema.json_schema, description=schema.description)


async def resolve_tools(
    conn: AsyncConnection, org_id: str, *, now: datetime, ids: Sequence[str] = (), names: Sequence[str] = ()
) -> list[Tool]:
    """Tools named by id or by name, in that order, without repeats; unknown ones are a 422.

    A base tool named is created (at ``now``) if the organization has none yet.
    """
    by_id = {t.id: t for t in await tool_store.get_tools(conn, org_id, ids)} if ids else {}
    missing_ids = [i for i in ids if i not in by_id]
    if missing_ids:
        raise InvalidInput(f"unknown tool ids: {', '.join(missing_ids)}", field="tool_ids")
    wanted_names = [n for n in names if n not in BASE_TOOLS]
    by_name = (
        {t.name: t for t in await tool_store.get_tools_by_name(conn, org_id, wanted_names)} if wanted_names else {}
    )
    if any(n in BASE_TOOLS for n in names):
        by_name.update(await ensure_base_tools(conn, org_id, now=now))
    missing_names = [n for n in names if n not in by_name]
    if missing_names:
        raise InvalidInput(f"unknown tools: {', '.join(missing_names)}", field="tools")
    ordered = [by_id[i] for i in ids] + [by_name[n] for n in names]
    return list({t.id: t for t in ordered}.values())


async def delete_tool(conn: AsyncConnection, org_id: str, tool_id: str) -> None:
    """Delete a tool, detaching it from every agent.

    Raises:
        NotFound: no such tool.
        Conflict: a tool rule of an agent that has the tool names it (change the rules first).
    """
    tool = await get_tool(conn, org_id, tool_id)
    named_by = [
        agent_id
        for agent_id, rules in await tool_store.rules_of_agents_using(conn, tool_id)
        if any(tool.name in rule.named_tools() for rule in parse_tool_rules(rules))
    ]
    if named_by:
        raise Conflict(
            f"tool {tool.name!r} is named by the tool rules of agents {', '.join(named_by[:10])}; "
            "remove those rules before deleting the tool"
        )
    await tool_store.delete_tool(conn, org_id, tool_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolMatch:
    """A tool found by :func:`search_tools`, its score and its place in the ranking (1 is best)."""

    tool: Tool
    score: float
    rank: int
    text: str


_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(text)]


async def search_tools(
    conn: AsyncConnection,
    org_id: str,
    *,
    now: datetime,
    query: str | None,
    tags: Sequence[str] = (),
    tool_types: Sequence[str] = (),
    limit: int = 50,
) -> list[ToolMatch]:
    """The organization's tools whose name, description or tags hold the query's words, best first.

    The score is the share of the query's words a tool holds (1.0: all of them); ties go by name.
    Without a query every tool matches with score 0. ``tags`` keeps tools with any of those tags,
    ``tool_types`` those of these types (``custom``, ``letta_core``, ``letta_memory_core``).

    Raises:
        InvalidInput: an unknown tool type.
    """
    known_types = {t.value for t in ToolType}
    unknown = [t for t in tool_types if t not in known_types]
    if unknown:
        raise InvalidInput(
            f"unknown tool types: {', '.join(unknown)} (known: {', '.join(sorted(known_types))})", field="tool_types"
        )
    await ensure_base_tools(conn, org_id, now=now)
    wanted = _words(query or "")
    found: list[tuple[float, str, Tool]] = []
    for tool in await tool_store.list_tools(conn, org_id, Page(limit=None)):
        if tags and not set(tags) & set(tool.tags):
            continue
        if tool_types and tool.tool_type.value not in tool_types:
            continue
        text = " ".join([tool.name, tool.name.replace("_", " "), tool.description, *tool.tags])
        held = set(_words(text))
        score = sum(word in held for word in wanted) / len(wanted) if wanted else 0.0
        if wanted and score == 0:
            continue
        found.append((score, text, tool))
    found.sort(key=lambda entry: (-entry[0], entry[2].name))
    return [
        ToolMatch(tool=tool, score=score, rank=rank, text=text)
        for rank, (score, text, tool) in enumerate(found[:limit], start=1)
    ]
