"""/v1/agents: agents, their tools, core memory blocks and messages."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import Field

from nightshift.api.agent_json import agent_response, agents_response
from nightshift.api.context_schemas import ContextWindowOverview
from nightshift.api.deps import Conn, Now, Org, ReadConn, State
from nightshift.api.errors import PROVIDER_ERROR_RESPONSES
from nightshift.api.input import Body, Name, Text, copied_fields
from nightshift.api.letta_messages import to_letta_messages
from nightshift.api.routers import secured
from nightshift.api.routers.agent_messages import ListedView
from nightshift.api.routers.params import PageQuery, page_of
from nightshift.api.schemas import (
    AgentCreate,
    AgentPublic,
    AgentRelation,
    AgentUpdate,
    BlockPublic,
    BlockUpdate,
    llm_config_from,
    secrets_of,
)
from nightshift.api.tool_schemas import ToolPublic
from nightshift.domain.agents import AgentType, LLMConfig, check_agent_type
from nightshift.domain.limits import MAX_MESSAGE_CHARS, MAX_NAME_CHARS, MAX_TAGS
from nightshift.domain.pagination import Page
from nightshift.domain.unset import UNSET, Maybe, given
from nightshift.errors import InvalidInput
from nightshift.services import agent_links, groups
from nightshift.services import agents as service
from nightshift.services import blocks as block_service
from nightshift.services.agents import AgentChanges, AgentSpec
from nightshift.services.catalog import ModelNames

router = secured("agents")

# The body's fields that the service takes under the same name as they are; the others are
# the router's to build (a model from its handle, secrets under either name, defaults).
_CREATE_OWN = frozenset(
    {"name", "agent_type", "llm_config", "memory_blocks", "metadata", "secrets", "enable_sleeptime"}
)
_CREATE_COPIED = tuple(name for name in copied_fields(AgentCreate, AgentSpec) if name not in _CREATE_OWN)
_UPDATE_COPIED = tuple(
    name for name in copied_fields(AgentUpdate, AgentChanges) if name not in {"agent_type", "llm_config", "secrets"}
)

IncludeQuery = Annotated[
    list[AgentRelation] | None,
    Query(description="Letta's: the relations to fill; without it, all of them", max_length=8),
]


@router.post("/v1/agents/")
@router.post("/v1/agents", include_in_schema=False)
async def create_agent(body: AgentCreate, conn: Conn, org: Org, state: State, now: Now) -> AgentPublic:
    """Create an agent with its memory blocks and tools.

    ``model`` is "provider/model-name" (anthropic/... or openai/...), or give ``llm_config``.
    ``agent_type`` picks the loop (default ``letta_v1_agent``, as Letta's); Letta's types that
    nightshift does not run are a 422. Without ``system`` the agent gets nightshift's default
    instructions for its loop. A memgpt agent's in-context window starts with four messages: the
    system message with memory compiled in, a greeting through send_message, its tool result, and
    a login event; a letta_v1 agent's with the system message alone.
    """
    spec = AgentSpec(
        **{name: getattr(body, name) for name in _CREATE_COPIED},
        name=body.name or "agent",
        agent_type=check_agent_type(body.agent_type or AgentType.LETTA_V1),
        llm_config=llm_config_from(
            body.model,
            body.llm_config,
            max_tokens=body.max_tokens,
            context_window=body.context_window_limit,
            models=state.models,
        ),
        memory_blocks=[b.to_spec() for b in body.memory_blocks],
        tool_names=body.tools,
        metadata=body.metadata or {},
        secrets=body.given_secrets(),
        initial_messages=(
            None if body.initial_message_sequence is None else [m.to_spec() for m in body.initial_message_sequence]
        ),
        enable_sleeptime=bool(body.enable_sleeptime),
    )
    (agent,) = await service.create_agents(conn, org, [spec], now=now)
    if spec.enable_sleeptime:
        await groups.pair(conn, org, [agent], now=now)
        agent = await service.get_agent(conn, org, agent.id)
    return AgentPublic.of(agent)


@router.get("/v1/agents/", response_model=list[AgentPublic])
@router.get("/v1/agents", include_in_schema=False, response_model=list[AgentPublic])
async def list_agents(
    conn: ReadConn,
    org: Org,
    page: PageQuery,
    name: Annotated[str | None, Query(description="Exact name")] = None,
    tags: Annotated[list[str] | None, Query(description="Agents with any of these tags", max_length=MAX_TAGS)] = None,
    match_all_tags: Annotated[bool, Query(description="Require every tag instead of any")] = False,
    query_text: Annotated[
        str | None, Query(max_length=MAX_NAME_CHARS, description="Agents whose name contains this, in any case")
    ] = None,
    include: IncludeQuery = None,
) -> Response:
    """A page of agents, oldest first (``order=desc`` for newest first).

    ``include`` names the relations to fill (``agent.blocks``, ``agent.tags``, ``agent.tools``,
    ``agent.secrets``); without it every one is. Leaving ``agent.tools`` out makes a page much
    smaller: each agent's tools carry their JSON schemas again.
    """
    agents = await service.list_agents(
        conn, org, page, name=name, tags=tags or (), match_all_tags=match_all_tags, query_text=query_text
    )
    return agents_response(agents, include=include)


@router.get("/v1/agents/{agent_id}", response_model=AgentPublic)
async def get_agent(agent_id: str, conn: ReadConn, org: Org, include: IncludeQuery = None) -> Response:
    """The agent; ``include`` as for the list (without it, every relation is filled)."""
    return agent_response(await service.get_agent(conn, org, agent_id), include=include)


@router.patch("/v1/agents/{agent_id}")
async def update_agent(agent_id: str, body: AgentUpdate, conn: Conn, org: Org, state: State, now: Now) -> AgentPublic:
    """Change an agent: name, system, blocks, tools, tool rules, model and the rest.

    A new system prompt or new blocks rewrite the agent's system message at once.
    """
    # Letta's clients send null for a field they leave alone: null keeps it, as absent does.
    secrets = secrets_of(body.secrets, body.tool_exec_environment_variables)
    changes = AgentChanges(
        **{name: given(getattr(body, name)) for name in _UPDATE_COPIED},
        agent_type=UNSET if body.agent_type is None else check_agent_type(body.agent_type),
        llm_config=await _new_llm_config(body, conn, org, agent_id, state.models),
        secrets=given(secrets),
    )
    agent = await service.update_agent(conn, org, agent_id, changes, now=now)
    if body.enable_sleeptime and await groups.pair(conn, org, [agent], now=now):
        agent = await service.get_agent(conn, org, agent.id)
    return AgentPublic.of(agent)


async def _new_llm_config(
    body: AgentUpdate, conn: Conn, org: str, agent_id: str, models: ModelNames
) -> Maybe[LLMConfig]:
    """The model settings the body asks for, over the agent's current ones; UNSET when it names none.

    A model the body names must be a known one; the agent's current model is kept as it is.
    """
    if not (body.model or body.llm_config or body.max_tokens or body.context_window_limit):
        return UNSET
    current = (await service.get_agent(conn, org, agent_id)).llm_config
    return llm_config_from(
        body.model or (None if body.llm_config else current.handle),
        body.llm_config,
        max_tokens=body.max_tokens or (None if body.llm_config else current.max_tokens),
        context_window=body.context_window_limit or (None if body.llm_config else current.context_window),
        parallel_tool_calls=current.parallel_tool_calls,
        models=models if body.model or body.llm_config else None,
    )


@router.delete("/v1/agents/{agent_id}")
async def delete_agent(agent_id: str, conn: Conn, org: Org, now: Now) -> dict[str, str]:
    """Delete an agent with its messages and archival passages.

    Blocks created with it (``memory_blocks``) that no other agent uses are deleted with it; shared
    blocks and blocks created on their own (``POST /v1/blocks``) are kept. Its batch runs keep their
    record (counts, tokens, costs, failures), where it shows as deleted; a step it is in ends for it.
    """
    await service.delete_agent(conn, org, agent_id, now=now)
    return {"message": f"agent {agent_id} deleted"}


@router.get("/v1/agents/{agent_id}/tools")
async def list_agent_tools(agent_id: str, conn: ReadConn, org: Org, page: PageQuery) -> list[ToolPublic]:
    """The agent's tools in the order they were given; ``after`` / ``before`` are tool ids."""
    tools = (await service.get_agent(conn, org, agent_id)).tools
    return [ToolPublic.of(t) for t in page_of(tools, page, key=lambda t: t.id)]


@router.patch("/v1/agents/{agent_id}/tools/attach/{tool_id}")
async def attach_tool(agent_id: str, tool_id: str, conn: Conn, org: Org, now: Now) -> AgentPublic:
    return AgentPublic.of(await agent_links.attach_tool(conn, org, agent_id, tool_id, now=now))


class ApprovalSetting(Body):
    """Letta's body of modify_approval: whether calls of the tool wait for approval."""

    requires_approval: bool


@router.patch("/v1/agents/{agent_id}/tools/approval/{tool_name}")
async def set_tool_approval(
    agent_id: str,
    tool_name: str,
    conn: Conn,
    org: Org,
    now: Now,
    body: ApprovalSetting | None = None,
    requires_approval: Annotated[bool | None, Query()] = None,
) -> AgentPublic:
    """Make each call of the agent's tool wait for approval (a requires_approval rule), or not.

    ``requires_approval`` comes in the body (preferred) or as a query parameter, as Letta takes it.
    """
    requires = body.requires_approval if body is not None else requires_approval
    if requires is None:
        raise InvalidInput("give requires_approval (true or false) in the body", field="requires_approval")
    agent = await agent_links.set_requires_approval(conn, org, agent_id, tool_name, requires, now=now)
    return AgentPublic.of(agent)


@router.patch("/v1/agents/{agent_id}/tools/detach/{tool_id}")
async def detach_tool(agent_id: str, tool_id: str, conn: Conn, org: Org, now: Now) -> AgentPublic:
    """Detach a tool; tool rules that name it stay, and hold again if it comes back."""
    return AgentPublic.of(await agent_links.detach_tool(conn, org, agent_id, tool_id, now=now))


@router.get("/v1/agents/{agent_id}/core-memory/blocks")
async def list_agent_blocks(agent_id: str, conn: ReadConn, org: Org, page: PageQuery) -> list[BlockPublic]:
    """The agent's blocks in the order they were given; ``after`` / ``before`` are block ids."""
    blocks = (await service.get_agent(conn, org, agent_id)).blocks
    return [BlockPublic.of(b) for b in page_of(blocks, page, key=lambda b: b.id)]


@router.get("/v1/agents/{agent_id}/core-memory/blocks/{label}")
async def get_agent_block(agent_id: str, label: str, conn: ReadConn, org: Org) -> BlockPublic:
    agent = await service.get_agent(conn, org, agent_id)
    return BlockPublic.of(agent_links.agent_block(agent, label))


@router.patch("/v1/agents/{agent_id}/core-memory/blocks/{label}")
async def update_agent_block(
    agent_id: str, label: str, body: BlockUpdate, conn: Conn, org: Org, now: Now
) -> BlockPublic:
    """Change the agent's block with this label; the agent's system message is rewritten to match."""
    agent = await service.get_agent(conn, org, agent_id)
    block = await block_service.update_block(conn, agent_links.agent_block(agent, label), body.to_changes(), now=now)
    await service.refresh_system_message(conn, await service.get_agent(conn, org, agent_id), now=now)
    return BlockPublic.of(block)


@router.patch("/v1/agents/{agent_id}/core-memory/blocks/attach/{block_id}")
async def attach_block(agent_id: str, block_id: str, conn: Conn, org: Org, now: Now) -> AgentPublic:
    return AgentPublic.of(await agent_links.attach_block(conn, org, agent_id, block_id, now=now))


@router.patch("/v1/agents/{agent_id}/core-memory/blocks/detach/{block_id}")
async def detach_block(agent_id: str, block_id: str, conn: Conn, org: Org, now: Now) -> AgentPublic:
    return AgentPublic.of(await agent_links.detach_block(conn, org, agent_id, block_id, now=now))


@router.get("/v1/agents/{agent_id}/context")
async def get_context(agent_id: str, conn: ReadConn, org: Org, now: Now) -> ContextWindowOverview:
    """Letta's context-window overview: what the agent's next request holds, part by part, in tokens.

    ``context_window_size_current`` is the size nightshift keeps the window by (the provider's
    count of the last request plus an estimate of what was added since); the parts are counted
    now, the way the agent's provider counts (tiktoken for OpenAI, an estimate for Anthropic).
    """
    return ContextWindowOverview.of(await service.context_overview(conn, org, agent_id, now=now))


@router.get("/v1/agents/{agent_id}/messages")
async def list_agent_messages(
    agent_id: str,
    conn: ReadConn,
    org: Org,
    view: ListedView,
    before: Annotated[str | None, Query(description="A message id: the messages before it in the sort order")] = None,
    after: Annotated[str | None, Query(description="A message id: the messages after it in the sort order")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
) -> list[dict[str, Any]]:
    """The agent's messages in Letta's shapes, newest first by default (``order=asc`` for oldest first).

    As Letta documents them, ``after`` / ``before`` are message ids in the specified sort order
    (with the default ``desc``, ``after`` gives older messages), so that its clients' iterators,
    which ask for ``after`` the last id they saw, walk the whole history once. ``limit`` counts
    stored messages: an assistant turn is shown as a reasoning message plus an assistant message
    (send_message) or a tool-call message, all with the stored message's id. As a send's,
    ``use_assistant_message``, ``assistant_message_tool_name`` / ``_kwarg`` and
    ``include_return_message_types`` say how to show them (the type filter applies to the page
    ``limit`` gave, as Letta's does).
    """
    page = Page(before=before, after=after, limit=limit, order="asc" if order == "asc" else "desc")
    messages = await service.list_messages(conn, org, agent_id, page)
    return [part for message in messages for part in to_letta_messages(message, view)]


class ResetMessages(Body):
    """Letta's ResetMessagesRequest."""

    add_default_initial_messages: bool = False


@router.patch("/v1/agents/{agent_id}/reset-messages")
async def reset_messages(
    agent_id: str, conn: Conn, org: Org, now: Now, body: ResetMessages | None = None
) -> AgentPublic:
    """Delete the agent's messages but its system message; its memory, tools and passages stay.

    With ``add_default_initial_messages`` it gets the greeting and login it started with. A 409
    while the agent is stepping.
    """
    add = body.add_default_initial_messages if body is not None else False
    return AgentPublic.of(await service.reset_messages(conn, org, agent_id, add_default_messages=add, now=now))


class GenerateBody(Body):
    """Letta's GenerateRequest."""

    prompt: Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE_CHARS)]
    system_prompt: Text | None = None
    override_model: Name | None = Field(default=None, description="provider/model-name instead of the agent's model")


@router.post("/v1/agents/{agent_id}/generate", responses=PROVIDER_ERROR_RESPONSES)
async def generate(agent_id: str, body: GenerateBody, state: State, org: Org, now: Now) -> dict[str, Any]:
    """One call of the provider's normal API with the prompt, on the agent's model; the agent is not changed.

    No memory, tools or messages of the agent are used or written. Returns the answer's text,
    the model and the token usage.
    """
    llm_config = None
    if body.override_model:
        llm_config = llm_config_from(body.override_model, None, models=None)
    response = await service.generate(
        state.engine,
        state.providers,
        org,
        agent_id,
        body.prompt,
        now=now,
        system=body.system_prompt,
        llm_config=llm_config,
    )
    usage = response.usage
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {
        "content": response.text or "",
        "model": response.model or (llm_config.model if llm_config else None),
        "usage": {
            "message_type": "usage_statistics",
            "prompt_tokens": prompt,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "step_count": 1,
        },
    }
