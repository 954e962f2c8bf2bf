"""Importing Agent Files (``.af``) as new agents, and exporting agents as Agent Files.

An import is one transaction (the caller's): the file is read and checked whole, then its
tools, blocks, agents and messages are written with the bulk store calls. Any problem is an
``InvalidInput`` naming it, and nothing is created.

A file may be as large as a request (tens of megabytes, a hundred thousand messages): reading
it, checking it and building its agents and messages run on a worker thread, in steps small
enough for the interpreter to switch back to the event loop between them, and the messages are
written ``INSERT_CHUNK`` at a time, so that the server keeps answering others meanwhile.

Tools: a tool whose name is one of nightshift's base tools (``tools.base.BASE_TOOLS``: Letta's
built-in names, e.g. ``send_message``, ``conversation_search``, ``core_memory_append``) becomes
the organization's base tool of that name, whatever the file says of it (as in Letta, built-in
tools cannot be changed by a file). Any other Letta built-in (``tool_type`` other than
``custom``) that nightshift lacks refuses the import, naming it. A custom tool needs its source;
when the organization has a tool of that name already, ``override_existing_tools`` replaces its
source and schema with the file's (Letta's default), otherwise the existing one is used.

Messages keep the file's order, times and in-context window. The system message (the first of
the window) is rebuilt from the agent's system prompt and blocks by nightshift, since that is
what the model will be shown at its next step anyway. Tool-call ids that a provider would
refuse are replaced, consistently in the call and its result.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.collector import collector_paused
from nightshift.domain.agent_file_export import export_agent_file as agent_file_document
from nightshift.domain.agent_files import AgentFile, FileAgent, FileMessage, FileTool, parse_agent_file
from nightshift.domain.agents import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_TOKENS,
    Agent,
    AgentType,
    LLMConfig,
    check_agent_type,
    check_secrets,
)
from nightshift.domain.blocks import Block
from nightshift.domain.groups import Group, ManagerType
from nightshift.domain.limits import MAX_NAME_CHARS
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.domain.tool_rules import check_tool_rules, dedupe_tool_rules, parse_tool_rules
from nightshift.domain.tools import Tool, ToolType
from nightshift.errors import InvalidInput
from nightshift.ids import new_id, new_tool_call_id
from nightshift.providers.registry import parse_model
from nightshift.runtime.memory import compile_system_message
from nightshift.services.agents import NewBlock, get_agent, new_block
from nightshift.services.catalog import ModelNames
from nightshift.services.tools import ensure_base_tools
from nightshift.store import agents as agent_store
from nightshift.store import blocks as block_store
from nightshift.store import groups as group_store
from nightshift.store import messages as message_store
from nightshift.store import tools as tool_store
from nightshift.store.pagination import MAX_PAGE, Page
from nightshift.tools.base import BASE_TOOLS, default_base_tools
from nightshift.tools.reading import DEFAULT_READ_SECONDS, read_tool

COPY_SUFFIX = "_copy"
# Messages written by one store call: building one call's rows holds the event loop.
INSERT_CHUNK = 500
# Messages freed at once once an import is written (see ``_release``).
RELEASE_CHUNK = 1000
# What both providers take as a tool-call id (OpenAI: at most 40 characters).
_PROVIDER_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportOptions:
    """Letta's import options.

    ``name`` replaces every imported agent's name; otherwise ``append_copy_suffix`` adds
    ``_copy`` to it. ``llm_config`` replaces the file's model. ``secrets`` gives the values of
    the tool secrets the file names (a file never holds their values; unnamed ones are left out,
    named ones without a value are empty).
    """

    append_copy_suffix: bool = True
    override_existing_tools: bool = True
    strip_messages: bool = False
    name: str | None = None
    llm_config: LLMConfig | None = None
    embedding: str | None = None
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    read_seconds: float = DEFAULT_READ_SECONDS  # for each custom tool's source (NIGHTSHIFT_TOOL_READ_SECONDS)
    models: ModelNames | None = None  # the file's models must be known ones (None: any of a known provider)


def _in_file(message: str) -> InvalidInput:
    return InvalidInput(message, field="file")


async def _custom_tool(
    conn: AsyncConnection,
    org_id: str,
    spec: FileTool,
    existing: Tool | None,
    options: ImportOptions,
    now: datetime,
) -> tuple[Tool, bool]:
    """The organization's tool for a custom tool of the file, and whether it is new; its source
    is read in a child process with a time limit, as a tool created through the API."""
    if existing is not None and not options.override_existing_tools:
        return existing, False
    if not spec.source_code or not spec.source_code.strip():
        raise _in_file(f"custom tool {spec.name!r} ({spec.id}) has no source_code: nightshift runs tools from source")
    try:
        read = await read_tool(
            spec.source_code, name=spec.name, json_schema=spec.json_schema or None, seconds=options.read_seconds
        )
        schema = read.schema
        json_schema = read.client_schema if read.client_schema is not None else dict(schema.json_schema)
    except InvalidInput as exc:
        raise _in_file(f"tool {spec.name!r} ({spec.id}): {exc.message}") from None
    description = spec.description or json_schema.get("description") or schema.description
    json_schema.setdefault("description", description)
    if existing is not None:
        updated = replace(
            existing,
            description=description,
            json_schema=json_schema,
            source_code=spec.source_code,
            tags=tuple(spec.tags or ()),
            return_char_limit=spec.return_char_limit,
            updated_at=now,
        )
        await tool_store.update_tool(conn, updated)
        return updated, False
    tool = Tool(
        id=new_id("tool"),
        organization_id=org_id,
        name=spec.name,
        description=description,
        json_schema=json_schema,
        tool_type=ToolType.CUSTOM,
        source_code=spec.source_code,
        tags=tuple(spec.tags or ()),
        return_char_limit=spec.return_char_limit,
        created_at=now,
        updated_at=now,
    )
    return tool, True


async def _import_tools(
    conn: AsyncConnection, org_id: str, document: AgentFile, *, options: ImportOptions, now: datetime
) -> dict[str, Tool]:
    """The organization's tool for each tool id of the file, creating or updating custom tools."""
    names = [t.name for t in document.tools]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise _in_file(f"the file holds several tools named {', '.join(repeated)}")
    missing = [t for t in document.tools if t.name not in BASE_TOOLS and t.tool_type != ToolType.CUSTOM.value]
    if missing:
        listed = ", ".join(f"{t.name} ({t.tool_type})" for t in missing)
        raise _in_file(
            f"the file's tools {listed} are Letta built-in tools that nightshift does not have; "
            f"nightshift's built-in tools are {', '.join(BASE_TOOLS)}. Remove them (and the rules naming them) "
            "from the file, or give them as custom tools with their source"
        )
    base = await ensure_base_tools(conn, org_id, now=now) if any(t.name in BASE_TOOLS for t in document.tools) else {}
    custom = [t for t in document.tools if t.name not in BASE_TOOLS]
    existing = {t.name: t for t in await tool_store.get_tools_by_name(conn, org_id, [t.name for t in custom])}
    mapping = {t.id: base[t.name] for t in document.tools if t.name in base}
    created: list[Tool] = []
    for spec in custom:
        tool, new = await _custom_tool(conn, org_id, spec, existing.get(spec.name), options, now)
        mapping[spec.id] = tool
        if new:
            created.append(tool)
    await tool_store.insert_tools(conn, created)
    return mapping


def _llm_config(agent: FileAgent, options: ImportOptions) -> LLMConfig:
    if options.llm_config is not None:
        return options.llm_config
    given = agent.llm_config
    handle = agent.model or (given.handle if given else None)
    if handle is None and given is not None:
        handle = given.model if "/" in given.model else f"{given.model_endpoint_type}/{given.model}"
    if handle is None:
        raise _in_file(f"agent {agent.id} ({agent.name!r}) names no model: give its llm_config or a model option")
    try:
        provider, model = parse_model(handle)
        if options.models is not None:
            options.models.check(provider.name, model)
    except InvalidInput as exc:
        raise InvalidInput(
            f"agent {agent.id} ({agent.name!r}): {exc.message}; import it with another model (the model option)",
            field="model",
        ) from None
    return LLMConfig(
        provider=provider.name,
        model=model,
        context_window=(given.context_window if given and given.context_window else DEFAULT_CONTEXT_WINDOW),
        max_tokens=(given.max_tokens if given and given.max_tokens else DEFAULT_MAX_TOKENS),
        temperature=given.temperature if given else None,
        parallel_tool_calls=given.parallel_tool_calls if given and given.parallel_tool_calls is not None else True,
    )


def _agent_type(agent: FileAgent) -> AgentType:
    """The file's agent type; without one, Letta's default for a new agent (``letta_v1_agent``)."""
    return check_agent_type(agent.agent_type or AgentType.LETTA_V1)


def _tools_of(
    agent: FileAgent, agent_type: AgentType, tools: Mapping[str, Tool], base: Mapping[str, Tool]
) -> tuple[Tool, ...]:
    # As on agent creation: the base tools an agent of its type gets by default, not every base tool there is.
    names = default_base_tools(agent_type)
    defaults = [tool for name, tool in base.items() if name in names] if agent.include_base_tools else []
    chosen = [tools[i] for i in agent.tool_ids] + defaults
    return tuple({t.id: t for t in chosen}.values())


def _aware(moment: datetime | None, now: datetime) -> datetime:
    if moment is None:
        return now
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _messages(agent: Agent, spec: FileAgent, options: ImportOptions, now: datetime) -> list[Message]:
    """The agent's messages, in the file's order, with ``agent.message_ids`` still to be set from them."""
    kept = [] if options.strip_messages else spec.messages
    calls: dict[str, str] = {}

    def call_id(given: str) -> str:
        return given if _PROVIDER_CALL_ID.fullmatch(given) else calls.setdefault(given, new_tool_call_id())

    def stored(message: FileMessage) -> Message:
        role = Role(message.role)
        answered = message.answered_call()
        return Message(
            id=new_id("message"),
            organization_id=agent.organization_id,
            agent_id=agent.id,
            role=role,
            text=message.text(),
            reasoning=message.reasoning(),
            tool_calls=tuple(
                ToolCall(id=call_id(c.id), name=c.function.name, arguments=c.function.arguments)
                for c in message.tool_calls or []
            ),
            tool_call_id=call_id(answered) if role is Role.TOOL and answered else None,
            name=message.name,
            is_error=message.is_error(),
            created_at=_aware(message.created_at, now),
        )

    return [stored(m) for m in kept]


def _system_message(agent: Agent, recall_count: int, now: datetime, created_at: datetime) -> Message:
    return Message(
        id=new_id("message"),
        organization_id=agent.organization_id,
        agent_id=agent.id,
        role=Role.SYSTEM,
        text=compile_system_message(agent.system, agent.blocks, now=now, recall_count=recall_count, archival_count=0),
        created_at=created_at,
    )


def _agent(
    org_id: str,
    spec: FileAgent,
    options: ImportOptions,
    *,
    blocks: Mapping[str, Block],
    tools: Mapping[str, Tool],
    base: Mapping[str, Tool],
    now: datetime,
) -> Agent:
    where = f"agent {spec.id} ({spec.name!r})"
    name = options.name or (spec.name + COPY_SUFFIX if options.append_copy_suffix else spec.name)
    if len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"{where}: the name {name[:40]!r}... is over {MAX_NAME_CHARS} characters", field="name")
    try:
        agent_type = _agent_type(spec)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}", field=exc.field) from None
    agent_tools = _tools_of(spec, agent_type, tools, base)
    try:
        rules = dedupe_tool_rules(parse_tool_rules(spec.tool_rules or []))
        check_tool_rules(rules, [t.name for t in agent_tools])
        secrets = check_secrets({n: options.secrets.get(n, "") for n in spec.secret_names()})
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}", field=exc.field) from None
    labels = [blocks[i].label for i in spec.block_ids]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise _in_file(f"{where} has several blocks labelled {', '.join(repeated)}")
    return Agent(
        id=new_id("agent"),
        organization_id=org_id,
        name=name,
        system=spec.system or "",
        agent_type=agent_type,
        description=spec.description,
        llm_config=_llm_config(spec, options),
        embedding=options.embedding or spec.embedding,
        blocks=tuple(blocks[i] for i in spec.block_ids),
        tools=agent_tools,
        tool_rules=tuple(rules),
        tags=tuple(dict.fromkeys(spec.tags or ())),
        metadata=dict(spec.metadata or {}),
        message_buffer_autoclear=spec.message_buffer_autoclear,
        secrets=secrets,
        created_at=now,
        updated_at=now,
    )


def _with_window(agent: Agent, spec: FileAgent, messages: list[Message], now: datetime) -> tuple[Agent, list[Message]]:
    """The agent with its in-context window, and its messages with the system message rebuilt."""
    if not messages:
        system = _system_message(agent, 0, now, now)
        return replace(agent, message_ids=(system.id,)), [system]
    by_file_id = {m.id: stored for m, stored in zip(spec.messages, messages, strict=True)}
    window = [by_file_id[i] for i in spec.in_context_message_ids]
    if not window:
        system = _system_message(agent, len(messages), now, now)
        return replace(agent, message_ids=(system.id,)), [*messages, system]
    first = window[0]
    rebuilt = _system_message(agent, len(messages), now, first.created_at)
    rebuilt = replace(rebuilt, id=first.id)
    messages = [rebuilt if m.id == first.id else m for m in messages]
    return replace(agent, message_ids=tuple(m.id for m in window)), messages


@dataclass(frozen=True, slots=True, kw_only=True)
class _Imported:
    """What an import writes, built from the file before anything is."""

    blocks: list[Block]
    agents: list[Agent]
    messages: list[Message]
    groups: list[Group]


def _build(
    org_id: str,
    document: AgentFile,
    options: ImportOptions,
    *,
    tools: Mapping[str, Tool],
    base: Mapping[str, Tool],
    now: datetime,
) -> _Imported:
    """The blocks, agents and messages of the file (pure, run on a worker thread)."""
    blocks: dict[str, Block] = {}
    for given in document.blocks:
        try:
            blocks[given.id] = new_block(
                org_id,
                NewBlock(
                    label=given.label,
                    value=given.value,
                    limit=given.limit,
                    description=given.description,
                    read_only=given.read_only,
                    metadata=dict(given.metadata or {}),
                ),
                now,
            )
        except InvalidInput as exc:
            raise _in_file(f"block {given.id}: {exc.message}") from None
    agents: list[Agent] = []
    messages: list[Message] = []
    for spec in document.agents:
        agent = _agent(org_id, spec, options, blocks=blocks, tools=tools, base=base, now=now)
        own = _messages(agent, spec, options, now)
        agent, own = _with_window(agent, spec, own, now)
        agents.append(agent)
        messages += own
    made = {spec.id: agent.id for spec, agent in zip(document.agents, agents, strict=True)}
    groups = [
        Group(
            id=new_id("group"),
            organization_id=org_id,
            manager_type=ManagerType.SLEEPTIME,
            description=given.description,
            agent_ids=tuple(made[i] for i in given.agent_ids),
            manager_agent_id=made[given.manager_config.manager_agent_id or ""],
            sleeptime_agent_frequency=given.manager_config.sleeptime_agent_frequency,
            shared_block_ids=tuple(blocks[i].id for i in given.shared_block_ids if i in blocks),
            hidden=given.hidden,
            created_at=now,
            updated_at=now,
        )
        for given in document.groups
    ]
    return _Imported(blocks=list(blocks.values()), agents=agents, messages=messages, groups=groups)


async def import_agent_file(
    conn: AsyncConnection, org_id: str, raw: bytes, options: ImportOptions, *, now: datetime
) -> list[Agent]:
    """Create the agents of an Agent File, with their blocks, tools and messages, made at ``now``.

    Raises:
        InvalidInput: what is wrong with the file (or what nightshift cannot import of it);
            nothing is written then, as the caller's transaction is rolled back.
    """
    with collector_paused():
        document = await asyncio.to_thread(parse_agent_file, raw)
        tools = await _import_tools(conn, org_id, document, options=options, now=now)
        wants_base = any(a.include_base_tools for a in document.agents)
        base = await ensure_base_tools(conn, org_id, now=now) if wants_base else {}
        built = await asyncio.to_thread(_build, org_id, document, options, tools=tools, base=base, now=now)
        try:
            await block_store.insert_blocks(conn, built.blocks)
            await agent_store.insert_agents(conn, built.agents)
            await group_store.insert_groups(conn, built.groups)
            for start in range(0, len(built.messages), INSERT_CHUNK):
                await message_store.insert_messages(conn, built.messages[start : start + INSERT_CHUNK])
        finally:
            await asyncio.to_thread(_release, [built.messages, *(a.messages for a in document.agents)])
    return built.agents


def _release(lists: list[list[Any]]) -> None:
    """Empty large lists a slice at a time: freeing a hundred thousand messages at once is one
    call into C, as long as building them took, that the interpreter would not interrupt."""
    for items in lists:
        while items:
            del items[-RELEASE_CHUNK:]


async def _all_messages(conn: AsyncConnection, agent_id: str) -> list[Message]:
    found: list[Message] = []
    after: str | None = None
    while True:
        page = await message_store.list_agent_messages(conn, agent_id, Page(after=after, limit=MAX_PAGE))
        found += page
        if len(page) < MAX_PAGE:
            return found
        after = page[-1].id


async def export_agent_file(conn: AsyncConnection, org_id: str, agent_id: str, *, now: datetime) -> dict[str, Any]:
    """The agent as an Agent File document (JSON-ready) made at ``now``, with every message it has.

    Raises:
        NotFound: no such agent in this organization.
    """
    agent = await get_agent(conn, org_id, agent_id)
    # An agent's sleep-time agents go with it, and their group, as Letta exports them.
    helpers = await agent_store.load_agents(conn, org_id, agent.group.agent_ids) if agent.group else {}
    agents = [agent, *helpers.values()]
    messages = {a.id: await _all_messages(conn, a.id) for a in agents}
    groups = [agent.group] if agent.group else []
    return agent_file_document(agents, messages, groups=groups, created_at=now)
