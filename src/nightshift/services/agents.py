"""Creating, changing and deleting agents, with their memory, tools and first messages."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.cancel_agent import AGENT_DELETED, leave_runs
from nightshift.domain.agents import Agent, AgentType, LLMConfig, check_secrets
from nightshift.domain.approvals import with_default_approvals
from nightshift.domain.blocks import Block, check_block, check_unique_labels
from nightshift.domain.limits import DEFAULT_BLOCK_LIMIT
from nightshift.domain.messages import Message, MessageKind, Role, ToolCall
from nightshift.domain.tool_rules import TerminalToolRule, ToolRule, check_tool_rules
from nightshift.domain.tools import Tool
from nightshift.domain.unset import UNSET, Maybe, set_fields
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.ids import new_id, new_tool_call_id
from nightshift.providers.base import ModelRequest, ModelResponse
from nightshift.providers.clients import ProviderSet
from nightshift.runtime.context import refresh_system_messages
from nightshift.runtime.memory import compile_system_message
from nightshift.runtime.prompts import FIRST_ASSISTANT_MESSAGE, default_system_prompt
from nightshift.runtime.window import ContextOverview, request_tokens, system_change_tokens
from nightshift.runtime.window import context_overview as window_overview
from nightshift.services.tools import check_tools_fit, ensure_base_tools, resolve_tools
from nightshift.store import agents as agent_store
from nightshift.store import blocks as block_store
from nightshift.store import groups as group_store
from nightshift.store import items as item_store
from nightshift.store import messages as message_store
from nightshift.store import passages as passage_store
from nightshift.store.pagination import Page
from nightshift.tools.base import default_base_tools


@dataclass(frozen=True, slots=True, kw_only=True)
class NewBlock:
    """A block to create together with an agent."""

    label: str
    value: str
    limit: int = DEFAULT_BLOCK_LIMIT
    description: str | None = None
    read_only: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentChanges:
    """What an update changes on an agent: every field left UNSET stays as it is.

    ``tool_ids`` and ``block_ids`` replace the agent's tools and blocks (in that order);
    ``secrets`` replaces its secrets as a whole.
    """

    name: Maybe[str] = UNSET
    description: Maybe[str | None] = UNSET
    system: Maybe[str] = UNSET
    agent_type: Maybe[AgentType] = UNSET
    llm_config: Maybe[LLMConfig] = UNSET
    embedding: Maybe[str | None] = UNSET
    tags: Maybe[Sequence[str]] = UNSET
    metadata: Maybe[dict[str, Any]] = UNSET
    message_buffer_autoclear: Maybe[bool] = UNSET
    tool_ids: Maybe[Sequence[str]] = UNSET
    block_ids: Maybe[Sequence[str]] = UNSET
    tool_rules: Maybe[Sequence[ToolRule]] = UNSET
    secrets: Maybe[Mapping[str, str]] = UNSET


@dataclass(frozen=True, slots=True, kw_only=True)
class InitialMessage:
    """A message of Letta's ``initial_message_sequence``: a user or assistant turn, by its text."""

    role: Role
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """Everything needed to create one agent.

    ``agent_type`` picks the loop, and with it the defaults: the base tools, the system prompt and
    the first messages (a letta_v1 agent starts with its system message alone, as in Letta).
    """

    name: str
    llm_config: LLMConfig
    agent_type: AgentType = AgentType.MEMGPT_V2
    system: str | None = None
    description: str | None = None
    embedding: str | None = None
    memory_blocks: Sequence[NewBlock] = ()
    block_ids: Sequence[str] = ()
    tool_ids: Sequence[str] = ()
    tool_names: Sequence[str] = ()
    include_base_tools: bool = True
    tool_rules: Sequence[ToolRule] = ()
    tags: Sequence[str] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    message_buffer_autoclear: bool = False
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The messages after the system message; None: the default greeting and login.
    initial_messages: Sequence[InitialMessage] | None = None
    # Made with a sleep-time agent (``services/groups.py`` pairs them): its default tools leave
    # memory edits to that agent, as in Letta.
    enable_sleeptime: bool = False


# AgentSpec's fields a new agent takes as they are; the others are made or checked on creation.
_MADE_ON_CREATION = frozenset({"system", "tool_rules", "tags", "metadata", "secrets"})
_COPIED_FROM_SPEC = tuple(
    spec.name
    for spec in fields(AgentSpec)
    if spec.name in {f.name for f in fields(Agent)} and spec.name not in _MADE_ON_CREATION
)


def new_block(org_id: str, spec: NewBlock, now: datetime) -> Block:
    """A block from its spec, refusing a value over the limit."""
    check_block(spec.label, spec.value, spec.limit)
    return Block(
        id=new_id("block"),
        organization_id=org_id,
        label=spec.label,
        value=spec.value,
        limit=spec.limit,
        description=spec.description,
        read_only=spec.read_only,
        metadata=dict(spec.metadata),
        created_at=now,
        updated_at=now,
    )


def _first_messages(
    agent_id: str,
    org_id: str,
    system_text: str,
    now: datetime,
    given: Sequence[InitialMessage] | None = None,
    *,
    agent_type: AgentType = AgentType.MEMGPT_V2,
) -> list[Message]:
    """The messages an agent starts with: system, then ``given`` or by default (memgpt agents) a
    greeting through send_message, its result and a login."""

    def message(role: Role, text: str, **extra: Any) -> Message:
        return Message(
            id=new_id("message"),
            organization_id=org_id,
            agent_id=agent_id,
            role=role,
            text=text,
            created_at=now,
            **extra,
        )

    system = message(Role.SYSTEM, system_text)
    if given is not None:
        return [system, *(message(m.role, m.text) for m in given)]
    if not agent_type.heartbeats:
        return [system]  # no send_message to greet through
    return [system, *_default_messages(message, now)]


def _default_messages(message: Callable[..., Message], now: datetime) -> list[Message]:
    """The greeting through send_message, its result, and a login event."""
    greeting = json.dumps({"message": FIRST_ASSISTANT_MESSAGE})
    call = ToolCall(id=new_tool_call_id(), name="send_message", arguments=greeting)
    login = {"type": "login", "last_login": "Never (first login)", "time": now.isoformat()}
    return [
        message(
            Role.ASSISTANT,
            "",
            reasoning="A new user. I'll greet them and start my notes.",
            tool_calls=(call,),
        ),
        message(
            Role.TOOL,
            json.dumps({"status": "OK", "message": "Sent message successfully.", "time": now.isoformat()}),
            tool_call_id=call.id,
            name="send_message",
        ),
        message(Role.USER, json.dumps(login), kind=MessageKind.LOGIN),
    ]


async def create_agents(
    conn: AsyncConnection, org_id: str, specs: Sequence[AgentSpec], *, now: datetime
) -> list[Agent]:
    """Create agents in bulk, made at ``now``: a fixed number of statements whatever ``len(specs)``.

    Raises:
        InvalidInput: an unknown tool or block, a repeated block label, a block over its limit,
            or tool rules that contradict each other.
    """
    base_tools = await ensure_base_tools(conn, org_id, now=now) if any(s.include_base_tools for s in specs) else {}
    all_tool_ids = list(dict.fromkeys(i for s in specs for i in s.tool_ids))
    all_tool_names = list(dict.fromkeys(n for s in specs for n in s.tool_names))
    known_tools = {t.id: t for t in await resolve_tools(conn, org_id, now=now, ids=all_tool_ids, names=all_tool_names)}
    tools_by_name = {t.name: t for t in known_tools.values()} | base_tools
    all_block_ids = list(dict.fromkeys(i for s in specs for i in s.block_ids))
    existing_blocks = {b.id: b for b in await block_store.get_blocks(conn, org_id, all_block_ids)}
    missing = [i for i in all_block_ids if i not in existing_blocks]
    if missing:
        raise InvalidInput(f"unknown block ids: {', '.join(missing)}", field="block_ids")

    created_blocks: list[Block] = []
    created: list[Agent] = []
    fitting: dict[str, set[str]] = {}  # tools checked for a provider already, by the provider
    first_messages: list[Message] = []
    for spec in specs:
        if not spec.name.strip():
            raise InvalidInput("name must not be empty", field="name")
        own = [new_block(org_id, b, now) for b in spec.memory_blocks]
        blocks = own + [existing_blocks[i] for i in spec.block_ids]
        check_unique_labels(blocks)
        tools: list[Tool] = [known_tools[i] for i in spec.tool_ids] + [tools_by_name[n] for n in spec.tool_names]
        rules = list(spec.tool_rules)
        if spec.include_base_tools:
            defaults = default_base_tools(spec.agent_type, sleeptime=spec.enable_sleeptime)
            tools += [tool for name, tool in base_tools.items() if name in defaults]
            if spec.agent_type is AgentType.SLEEPTIME and not rules:
                rules = [TerminalToolRule(tool_name="memory_finish_edits")]  # its run ends there
        tools = list({t.id: t for t in tools}.values())
        rules = with_default_approvals(rules, tools)
        check_tool_rules(rules, [t.name for t in tools])
        checked = fitting.setdefault(spec.llm_config.provider, set())
        check_tools_fit([t for t in tools if t.id not in checked], [spec.llm_config.provider])
        checked.update(t.id for t in tools)
        agent_id = new_id("agent")
        system = spec.system if spec.system and spec.system.strip() else default_system_prompt(spec.agent_type)
        system_text = compile_system_message(system, blocks, now=now, recall_count=0, archival_count=0)
        messages = _first_messages(
            agent_id, org_id, system_text, now, spec.initial_messages, agent_type=spec.agent_type
        )
        created_blocks += own
        first_messages += messages
        agent = Agent(
            **{name: getattr(spec, name) for name in _COPIED_FROM_SPEC},
            id=agent_id,
            organization_id=org_id,
            system=system,
            blocks=tuple(blocks),
            tools=tuple(tools),
            tool_rules=tuple(rules),
            tags=tuple(dict.fromkeys(spec.tags)),
            metadata=dict(spec.metadata),
            message_ids=tuple(m.id for m in messages),
            secrets=check_secrets(spec.secrets),
            created_at=now,
            updated_at=now,
        )
        created.append(replace(agent, context_tokens=request_tokens(agent, messages)))
    await block_store.insert_blocks(conn, created_blocks)
    await agent_store.insert_agents(conn, created)
    await message_store.insert_messages(conn, first_messages)
    return created


async def get_agent(conn: AsyncConnection, org_id: str, agent_id: str) -> Agent:
    """The agent, or NotFound (also for another organization's agent)."""
    found = await agent_store.load_agents(conn, org_id, [agent_id])
    if agent_id not in found:
        raise NotFound(f"agent {agent_id} not found")
    return found[agent_id]


async def list_agents(
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    name: str | None = None,
    tags: Sequence[str] = (),
    match_all_tags: bool = False,
    query_text: str | None = None,
) -> list[Agent]:
    """A page of agents, filtered by name (exact, or containing ``query_text``) and tags, in the page's order."""
    ids = await agent_store.list_agent_ids(
        conn, org_id, page, name=name, tags=tags, match_all_tags=match_all_tags, query_text=query_text
    )
    loaded = await agent_store.load_agents(conn, org_id, ids)
    return [loaded[i] for i in ids if i in loaded]


async def save_agent(conn: AsyncConnection, before: Agent, after: Agent, *, now: datetime) -> Agent:
    """Store ``after`` (links too when they changed), updated at ``now``, and refresh its system message if its
    prompt or memory changed."""
    after = replace(after, updated_at=now)
    if (before.tools, before.llm_config.provider) != (after.tools, after.llm_config.provider):
        check_tools_fit(after.tools, [after.llm_config.provider])
        after = replace(after, context_tokens=None)  # its window is counted again at its next step
    if (before.tags, before.blocks, before.tools) != (after.tags, after.blocks, after.tools):
        await agent_store.set_links(conn, after)
    await agent_store.update_agents(conn, [after])
    return await refresh_system_message(conn, after, now=now)


async def refresh_system_message(conn: AsyncConnection, agent: Agent, *, now: datetime) -> Agent:
    """Rewrite the agent's system message in place when its prompt or core memory no longer match
    it (its window's size follows); returns the agent as it is now."""
    changed = await refresh_system_messages(conn, [agent], now)
    if agent.id not in changed or agent.context_tokens is None:
        return agent
    tokens = agent.context_tokens + system_change_tokens(agent, *changed[agent.id])
    agent = replace(agent, context_tokens=tokens)
    await agent_store.set_windows(conn, [agent], now)
    return agent


async def context_overview(conn: AsyncConnection, org_id: str, agent_id: str, *, now: datetime) -> ContextOverview:
    """What the agent's next request holds, part by part (``GET /v1/agents/{id}/context``).

    Raises:
        NotFound: no such agent.
    """
    agent = await get_agent(conn, org_id, agent_id)
    stored = await message_store.get_messages(conn, agent.message_ids)
    window = [stored[i] for i in agent.message_ids if i in stored]
    recall = (await message_store.count_messages(conn, [agent_id]))[agent_id]
    archival = (await passage_store.count_passages(conn, [agent_id]))[agent_id]
    return window_overview(agent, window, recall_count=recall, archival_count=archival, now=now)


async def update_agent(
    conn: AsyncConnection, org_id: str, agent_id: str, changes: AgentChanges, *, now: datetime
) -> Agent:
    """Apply ``changes`` to the agent; its tool rules must still name tools it has."""
    agent = await get_agent(conn, org_id, agent_id)
    fields = _plain_changes(changes)
    if changes.tool_ids is not UNSET:
        fields["tools"] = tuple(await resolve_tools(conn, org_id, now=now, ids=list(changes.tool_ids)))
        given = [t for t in fields["tools"] if agent.tool(t.name) is None]
        fields["tool_rules"] = tuple(with_default_approvals(fields.get("tool_rules", agent.tool_rules), given))
    if changes.block_ids is not UNSET:
        fields["blocks"] = tuple(await _blocks_by_id(conn, org_id, changes.block_ids))
    if changes.secrets is not UNSET:
        fields["secrets"] = check_secrets(changes.secrets)
    updated = replace(agent, **fields)
    check_tool_rules(updated.tool_rules, [t.name for t in updated.tools])
    return await save_agent(conn, agent, updated, now=now)


def _plain_changes(changes: AgentChanges) -> dict[str, Any]:
    """The agent's fields ``changes`` sets without a lookup or a check of its own (tools, blocks,
    secrets): the fields of the same names, as they are but for the sequences."""
    if changes.name is not UNSET and not changes.name.strip():
        raise InvalidInput("name must not be empty", field="name")
    if changes.system is not UNSET and not changes.system.strip():
        raise InvalidInput("system must not be empty", field="system")
    found = {name: value for name, value in set_fields(changes).items() if name not in _LOOKED_UP}
    if "tags" in found:
        found["tags"] = tuple(dict.fromkeys(found["tags"]))
    if "tool_rules" in found:
        found["tool_rules"] = tuple(found["tool_rules"])
    return found


# AgentChanges' fields that are not the agent's as they are: tools and blocks by id, checked secrets.
_LOOKED_UP = frozenset({"tool_ids", "block_ids", "secrets"})


async def _blocks_by_id(conn: AsyncConnection, org_id: str, block_ids: Sequence[str]) -> list[Block]:
    """The blocks, in the order given without repeats; an unknown id or a repeated label is a 422."""
    ids = list(dict.fromkeys(block_ids))
    found = {b.id: b for b in await block_store.get_blocks(conn, org_id, ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise InvalidInput(f"unknown block ids: {', '.join(missing)}", field="block_ids")
    blocks = [found[i] for i in ids]
    check_unique_labels(blocks)
    return blocks


async def delete_agent(conn: AsyncConnection, org_id: str, agent_id: str, *, now: datetime) -> None:
    """Delete the agent, its messages and passages, and the blocks made with it that no other agent
    uses; blocks made on their own (``POST /v1/blocks``) stay.

    Deleting a main agent deletes its sleep-time agents (and their group); deleting a sleep-time
    agent deletes its group, and the main agent goes on alone.

    The record of its batch runs stays: its items (counts, tokens, costs, failures), shown as a
    deleted agent's. A step it is in is over for it: its item is cancelled, and what the provider
    answers for it later is ignored. Its agent runs go with it (the table cascades): one stepping it
    in a request or the background ends without writing more, as a cancelled run does.
    """
    if not await agent_store.agent_exists(conn, org_id, agent_id):
        raise NotFound(f"agent {agent_id} not found")
    # Its batch runs' rows first, then its own, then (deleted with it) its agent runs': the order
    # every step takes them in. A step in flight then either wrote all of itself before, or finds
    # its run gone and writes nothing.
    await leave_runs(conn, agent_id, AGENT_DELETED, now, queued=False)
    await agent_store.lock_agents(conn, [agent_id])
    # Its sleep-time group goes with it (after the agent's row: the order a turn takes them in),
    # and a main agent's sleep-time agents too, as in Letta.
    groups = await group_store.get_groups(conn, org_id, await group_store.groups_with_agents(conn, [agent_id]))
    await group_store.delete_groups(conn, list(groups), now)
    if not await agent_store.delete_agent(conn, org_id, agent_id, now):
        raise NotFound(f"agent {agent_id} not found")
    for helper in (a for g in groups.values() if g.manager_agent_id == agent_id for a in g.agent_ids):
        if await agent_store.agent_exists(conn, org_id, helper):
            await delete_agent(conn, org_id, helper, now=now)


async def list_messages(conn: AsyncConnection, org_id: str, agent_id: str, page: Page) -> list[Message]:
    """A page of the agent's stored messages (NotFound for an unknown agent, checked in one statement)."""
    if not await agent_store.agent_exists(conn, org_id, agent_id):
        raise NotFound(f"agent {agent_id} not found")
    return await message_store.list_agent_messages(conn, agent_id, page)


async def reset_messages(
    conn: AsyncConnection, org_id: str, agent_id: str, *, add_default_messages: bool, now: datetime
) -> Agent:
    """Delete the agent's messages but its system message, as Letta's reset does.

    With ``add_default_messages`` the agent gets the greeting and login it started with. Its
    memory, tools and archival passages stay.

    Raises:
        NotFound: no such agent.
        Conflict: the agent is in an open step of a batch run or in a synchronous step.
    """
    await agent_store.lock_agents(conn, [agent_id])
    agent = await get_agent(conn, org_id, agent_id)
    if await agent_store.agents_stepping(conn, [agent_id], now) or await item_store.agents_in_open_steps(
        conn, [agent_id]
    ):
        raise Conflict(f"agent {agent_id} is stepping; reset its messages once the step is over")
    system_id = agent.message_ids[0]
    await message_store.delete_agent_messages(conn, agent_id, keep=[system_id])
    added: list[Message] = []
    if add_default_messages:
        (_, *added) = _first_messages(agent_id, org_id, "", now)
        await message_store.insert_messages(conn, added)
    window = (system_id, *(m.id for m in added))
    reset = replace(agent, message_ids=window, context_tokens=None, updated_at=now)  # counted at its next step
    await agent_store.set_windows(conn, [reset], now)
    return await refresh_system_message(conn, reset, now=now)  # the memory metadata counts the messages


async def generate(
    engine: AsyncEngine,
    providers: ProviderSet,
    org_id: str,
    agent_id: str,
    prompt: str,
    *,
    now: datetime,
    system: str | None = None,
    llm_config: LLMConfig | None = None,
) -> ModelResponse:
    """One call of the provider's normal API with ``prompt``, on the agent's model (or ``llm_config``).

    Nothing of the agent is read but its model, and nothing is written: no memory, no tools, no
    message. Letta's ``POST /v1/agents/{id}/generate``.

    Raises:
        NotFound: no such agent.
        InvalidInput: an empty prompt.
        ProviderError: the provider failed.
    """
    if not prompt.strip():
        raise InvalidInput("prompt must not be empty", field="prompt")
    async with engine.connect() as conn:  # not held while the provider answers
        agent = await get_agent(conn, org_id, agent_id)
    config = llm_config or agent.llm_config
    message = Message(
        id=new_id("message"),
        organization_id=org_id,
        agent_id=agent_id,
        role=Role.USER,
        text=prompt,
        created_at=now,
    )
    request = ModelRequest.from_config(config, system=system or "", messages=[message], require_tool_call=False)
    return await providers.get(config.provider).complete(request)
