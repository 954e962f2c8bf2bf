"""Request and response bodies, in Letta's field names, and their mapping to domain types.

These are the wire layer only: routers turn them into domain calls and domain objects into
``...Public`` models. Unknown request fields are ignored, as Letta's clients send many.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from nightshift.api.batch_schemas import TextPart
from nightshift.api.group_schemas import GroupPublic, group_json
from nightshift.api.input import Body, Ids, Name, Tags, Text, copied_fields
from nightshift.api.tool_schemas import ToolPublic
from nightshift.domain.agents import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_TOKENS,
    Agent,
    LLMConfig,
)
from nightshift.domain.blocks import Block
from nightshift.domain.limits import (
    DEFAULT_BLOCK_LIMIT,
    MAX_BLOCK_LIMIT,
    MAX_CONTEXT_WINDOW,
    MAX_LIST_ITEMS,
    MAX_MESSAGE_PARTS,
    MAX_NAME_CHARS,
    MAX_OUTPUT_TOKENS,
)
from nightshift.domain.messages import Role
from nightshift.domain.tool_rules import ToolRule, dedupe_tool_rules, dump_tool_rules
from nightshift.domain.unset import UNSET, given
from nightshift.errors import InvalidInput
from nightshift.providers.registry import known_names, parse_model, providers
from nightshift.services.agents import InitialMessage, NewBlock
from nightshift.services.blocks import BlockChanges
from nightshift.services.catalog import ModelNames, model_context_window

ContextWindow = Annotated[int, Field(ge=1, le=MAX_CONTEXT_WINDOW)]
MaxTokens = Annotated[int, Field(ge=1, le=MAX_OUTPUT_TOKENS)]
BlockLimit = Annotated[int, Field(ge=1, le=MAX_BLOCK_LIMIT)]
Label = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
ToolRules = Annotated[list[ToolRule], Field(max_length=MAX_LIST_ITEMS)]


class LLMConfigBody(Body):
    """Letta's llm_config: the model and its limits."""

    model: Name
    model_endpoint_type: Name | None = None
    context_window: ContextWindow = DEFAULT_CONTEXT_WINDOW
    max_tokens: MaxTokens | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    handle: Name | None = None
    parallel_tool_calls: bool | None = Field(
        default=None,
        description="Whether the model may call several tools in one turn (default true; an update keeps it)",
    )


class BlockCreate(Body):
    """A block of core memory to create (standalone or inside an agent)."""

    label: Label
    value: Text
    limit: BlockLimit = DEFAULT_BLOCK_LIMIT
    description: Text | None = None
    read_only: bool = False
    metadata: dict[str, Any] | None = None

    def to_spec(self) -> NewBlock:
        return NewBlock(
            label=self.label,
            value=self.value,
            limit=self.limit,
            description=self.description,
            read_only=self.read_only,
            metadata=self.metadata or {},
        )


class BlockUpdate(Body):
    """Fields of a block to change; absent fields stay as they are."""

    value: Text | None = None
    limit: BlockLimit | None = None
    label: Label | None = None
    description: Text | None = None
    read_only: bool | None = None
    metadata: dict[str, Any] | None = None

    def to_changes(self) -> BlockChanges:
        """The service's update: null keeps a field as absent does, except the description, which it clears."""
        return BlockChanges(
            value=given(self.value),
            limit=given(self.limit),
            label=given(self.label),
            description=self.description if "description" in self.model_fields_set else UNSET,
            read_only=given(self.read_only),
            metadata=given(self.metadata),
        )


class BlockPublic(BaseModel):
    id: str
    label: str
    value: str
    limit: int
    description: str | None
    read_only: bool
    metadata: dict[str, Any]
    is_template: bool = False
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, block: Block) -> BlockPublic:
        return cls(**block_copied(block))


_BLOCK_COPIED = copied_fields(BlockPublic, Block)


def block_copied(block: Block) -> dict[str, Any]:
    """BlockPublic's fields that are the block's own, as they are (all but ``is_template``)."""
    return {name: getattr(block, name) for name in _BLOCK_COPIED}


def llm_config_from(
    model: str | None,
    body: LLMConfigBody | None,
    *,
    max_tokens: int | None = None,
    context_window: int | None = None,
    parallel_tool_calls: bool = True,
    models: ModelNames | None,
) -> LLMConfig:
    """Our LLMConfig from Letta's ``model`` handle and/or ``llm_config``; one of them is required.

    ``parallel_tool_calls`` is used when ``llm_config`` does not say (an update passes the current value).
    With ``models`` the model must be a known one (a 422 naming the close names); without, only its
    provider is checked (a one-off call, which fails at once and says why).
    """
    handle = model or (body.handle if body else None)
    if handle is None and body is not None:
        if "/" in body.model:
            handle = body.model
        elif body.model_endpoint_type in {info.name for info in providers()}:
            handle = f"{body.model_endpoint_type}/{body.model}"
        else:
            raise InvalidInput(
                f"llm_config.model_endpoint_type must be one of {known_names()} (or give model as provider/model-name)",
                field="llm_config",
            )
    if handle is None:
        raise InvalidInput(
            f"model is required, as provider/model-name (e.g. {providers()[0].example_handle})", field="model"
        )
    provider, name = parse_model(handle)
    if models is not None:
        models.check(provider.name, name)
    window = context_window or (body.context_window if body else DEFAULT_CONTEXT_WINDOW)
    # No larger than the model's own window, where the price data knows it.
    window = min(window, model_context_window(provider.name, name) or window)
    return LLMConfig(
        provider=provider.name,
        model=name,
        context_window=window,
        max_tokens=max_tokens or (body.max_tokens if body and body.max_tokens else DEFAULT_MAX_TOKENS),
        temperature=body.temperature if body else None,
        parallel_tool_calls=(
            body.parallel_tool_calls if body and body.parallel_tool_calls is not None else parallel_tool_calls
        ),
    )


class InitialMessageBody(Body):
    """A message of Letta's ``initial_message_sequence``: a user, system or assistant turn.

    A system message reaches the model as a user turn marked [system], as in a request's messages.
    """

    role: Literal["user", "system", "assistant"] = "user"
    content: Text | Annotated[list[TextPart], Field(max_length=MAX_MESSAGE_PARTS)]

    def to_spec(self) -> InitialMessage:
        text = self.content if isinstance(self.content, str) else "\n".join(p.text for p in self.content)
        if self.role == "assistant":
            return InitialMessage(role=Role.ASSISTANT, text=text)
        return InitialMessage(role=Role.USER, text=f"[system] {text}" if self.role == "system" else text)


class AgentCreate(Body):
    """Letta's CreateAgentRequest, the parts nightshift uses."""

    name: Name | None = None
    system: Text | None = None
    description: Text | None = None
    agent_type: Name | None = Field(
        default=None,
        description="The loop the agent runs: letta_v1_agent (the default, as in Letta), memgpt_v2_agent, memgpt_agent",
    )
    model: Name | None = None
    llm_config: LLMConfigBody | None = None
    max_tokens: MaxTokens | None = None
    context_window_limit: ContextWindow | None = None
    embedding: Name | None = None
    memory_blocks: Annotated[list[BlockCreate], Field(max_length=MAX_LIST_ITEMS)] = Field(default_factory=list)
    block_ids: Ids = Field(default_factory=list)
    tool_ids: Ids = Field(default_factory=list)
    tools: Ids = Field(default_factory=list)
    include_base_tools: bool = True
    tool_rules: ToolRules = Field(default_factory=list)
    tags: Tags = Field(default_factory=list)
    metadata: dict[str, Any] | None = None
    message_buffer_autoclear: bool = False
    secrets: dict[str, str] | None = Field(
        default=None, description="Environment variables of the agent's tool calls; responses never show the values"
    )
    tool_exec_environment_variables: dict[str, str] | None = Field(
        default=None, description="Letta's older name for secrets"
    )
    initial_message_sequence: Annotated[list[InitialMessageBody], Field(max_length=MAX_LIST_ITEMS)] | None = Field(
        default=None,
        description="The messages after the system message in the agent's first window (default: a greeting, a login)",
    )
    enable_sleeptime: bool | None = Field(
        default=None,
        description="Make a sleep-time agent that keeps this agent's memory in the background, in batch runs",
    )

    @field_validator("memory_blocks", "block_ids", "tool_ids", "tools", "tool_rules", "tags", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("tool_rules")
    @classmethod
    def _drop_repeated_rules(cls, rules: list[ToolRule]) -> list[ToolRule]:
        return dedupe_tool_rules(rules)

    def given_secrets(self) -> dict[str, str]:
        return secrets_of(self.secrets, self.tool_exec_environment_variables) or {}


class AgentUpdate(Body):
    """Letta's UpdateAgent: every field optional; absent fields stay as they are."""

    name: Name | None = None
    system: Text | None = None
    description: Text | None = None
    agent_type: Name | None = Field(default=None, description="The loop the agent runs from its next step on")
    model: Name | None = None
    llm_config: LLMConfigBody | None = None
    max_tokens: MaxTokens | None = None
    context_window_limit: ContextWindow | None = None
    embedding: Name | None = None
    block_ids: Ids | None = None
    tool_ids: Ids | None = None
    tool_rules: ToolRules | None = None
    tags: Tags | None = None
    metadata: dict[str, Any] | None = None
    message_buffer_autoclear: bool | None = None
    secrets: dict[str, str] | None = Field(
        default=None, description="Replaces the agent's secrets (environment variables of its tool calls)"
    )
    tool_exec_environment_variables: dict[str, str] | None = Field(
        default=None, description="Letta's older name for secrets"
    )
    enable_sleeptime: bool | None = Field(
        default=None, description="true: give the agent a sleep-time agent, if it has none (false changes nothing)"
    )

    @field_validator("tool_rules")
    @classmethod
    def _drop_repeated_rules(cls, rules: list[ToolRule] | None) -> list[ToolRule] | None:
        return None if rules is None else dedupe_tool_rules(rules)


def secrets_of(secrets: dict[str, str] | None, older: dict[str, str] | None) -> dict[str, str] | None:
    """The secrets a request gives, under Letta's current name or its older one (not both)."""
    if secrets is not None and older is not None:
        raise InvalidInput("give secrets or tool_exec_environment_variables, not both", field="secrets")
    return secrets if secrets is not None else older


class AgentSecretPublic(BaseModel):
    """One of an agent's secrets, as Letta lists them; the value is never sent back (always "")."""

    agent_id: str
    key: str
    value: str = ""


class LLMConfigPublic(BaseModel):
    model: str
    model_endpoint_type: str
    context_window: int
    max_tokens: int
    temperature: float | None
    handle: str
    parallel_tool_calls: bool


class MemoryPublic(BaseModel):
    blocks: list[BlockPublic]


# Letta's ``include`` on agent reads: the relations a client wants. Those nightshift has no such
# relation for (identities, sources, groups, approvals) are accepted and give nothing.
AgentRelation = Literal[
    "agent.blocks",
    "agent.identities",
    "agent.managed_group",
    "agent.pending_approval",
    "agent.secrets",
    "agent.sources",
    "agent.tags",
    "agent.tools",
]


class AgentPublic(BaseModel):
    id: str
    name: str
    system: str
    description: str | None
    agent_type: str
    model: str
    llm_config: LLMConfigPublic
    embedding: str | None
    embedding_config: None = None
    memory: MemoryPublic
    blocks: list[BlockPublic]
    tools: list[ToolPublic]
    sources: list[Any] = Field(default_factory=list)
    tool_rules: list[dict[str, Any]]
    tags: list[str]
    metadata: dict[str, Any]
    message_ids: list[str]
    message_buffer_autoclear: bool
    secrets: list[AgentSecretPublic]
    tool_exec_environment_variables: list[AgentSecretPublic]
    enable_sleeptime: bool = Field(description="Whether a sleep-time agent keeps this agent's memory")
    managed_group: GroupPublic | None = Field(description="The sleep-time group the agent manages")
    multi_agent_group: GroupPublic | None = Field(description="Letta's older name for managed_group")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def many(cls, agents: Iterable[Agent], *, include: Collection[AgentRelation] | None = None) -> list[AgentPublic]:
        """Several agents; a tool they share (the base tools: every agent has them) is mapped once."""
        shared: dict[str, ToolPublic] = {}
        return [cls.of(agent, tools=shared, include=include) for agent in agents]

    @classmethod
    def of(
        cls,
        agent: Agent,
        *,
        tools: dict[str, ToolPublic] | None = None,
        include: Collection[AgentRelation] | None = None,
    ) -> AgentPublic:
        """The agent in Letta's shape. ``tools``: the tools already mapped, by id, to reuse and add to
        (a page of agents is mostly the same ten tools with their JSON schemas). ``include``: Letta's,
        the relations to fill (blocks, tags, tools, secrets); the others are empty. None: all of
        them (Letta's own default is none: nightshift keeps what its clients always had)."""

        def wanted(relation: AgentRelation) -> bool:
            return include is None or relation in include

        mapped = {} if tools is None else tools
        shown_tools = agent.tools if wanted("agent.tools") else ()
        for tool in shown_tools:
            if tool.id not in mapped:
                mapped[tool.id] = ToolPublic.of(tool)
        blocks = [BlockPublic.of(b) for b in agent.blocks] if wanted("agent.blocks") else []
        secret_keys = sorted(agent.secrets) if wanted("agent.secrets") else []
        secrets = [AgentSecretPublic(agent_id=agent.id, key=key) for key in secret_keys]
        group = agent_group_json(agent, include)
        own = {
            "model": agent.llm_config.handle,
            "llm_config": LLMConfigPublic(**llm_config_fields(agent.llm_config)),
            "memory": MemoryPublic(blocks=blocks),
            "blocks": blocks,
            "tools": [mapped[t.id] for t in shown_tools],
            "tool_rules": dump_tool_rules(agent.tool_rules),
            "tags": list(agent.tags) if wanted("agent.tags") else [],
            "secrets": secrets,
            "tool_exec_environment_variables": secrets,
            "enable_sleeptime": agent.group is not None,
            "managed_group": group,
            "multi_agent_group": group,
        }
        return cls(**{**agent_copied(agent), **own})


_AGENT_COPIED = copied_fields(AgentPublic, Agent)


def agent_copied(agent: Agent) -> dict[str, Any]:
    """AgentPublic's fields that are the agent's own, as they are (a tuple stands for a list)."""
    return {name: getattr(agent, name) for name in _AGENT_COPIED}


def agent_group_json(agent: Agent, include: Collection[AgentRelation] | None) -> dict[str, Any] | None:
    """The group the agent manages as JSON, when it has one and ``include`` asks for it (None: all)."""
    if agent.group is None or (include is not None and "agent.managed_group" not in include):
        return None
    return group_json(agent.group)


def llm_config_fields(config: LLMConfig) -> dict[str, Any]:
    """LLMConfigPublic's fields, in its order."""
    return {
        "model": config.model,
        "model_endpoint_type": config.provider,
        "context_window": config.context_window,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "handle": config.handle,
        "parallel_tool_calls": config.parallel_tool_calls,
    }
