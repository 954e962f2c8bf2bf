"""Request and response bodies, in Letta's field names, and their mapping to domain types.

These are the wire layer only: routers turn them into domain calls and domain objects into
``...Public`` models. Unknown request fields are ignored, as Letta's clients send many.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nightshift.domain.agents import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_TOKENS,
    Agent,
    LLMConfig,
    Provider,
    parse_model_handle,
)
from nightshift.domain.blocks import DEFAULT_BLOCK_LIMIT, Block
from nightshift.domain.tool_rules import ToolRule, dump_tool_rules
from nightshift.domain.tools import Tool
from nightshift.errors import InvalidInput
from nightshift.services.agents import NewBlock


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class LLMConfigBody(_Body):
    """Letta's llm_config: the model and its limits."""

    model: str
    model_endpoint_type: str | None = None
    context_window: int = Field(default=DEFAULT_CONTEXT_WINDOW, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    handle: str | None = None


class BlockCreate(_Body):
    """A block of core memory to create (standalone or inside an agent)."""

    label: str = Field(min_length=1)
    value: str
    limit: int = Field(default=DEFAULT_BLOCK_LIMIT, ge=1)
    description: str | None = None
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


class BlockUpdate(_Body):
    """Fields of a block to change; absent fields stay as they are."""

    value: str | None = None
    limit: int | None = Field(default=None, ge=1)
    label: str | None = Field(default=None, min_length=1)
    description: str | None = None
    read_only: bool | None = None
    metadata: dict[str, Any] | None = None


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
        return cls(
            id=block.id,
            label=block.label,
            value=block.value,
            limit=block.limit,
            description=block.description,
            read_only=block.read_only,
            metadata=block.metadata,
            created_at=block.created_at,
            updated_at=block.updated_at,
        )


class ToolCreate(_Body):
    """A custom tool: Python source whose function signature and docstring give the schema."""

    source_code: str = Field(min_length=1)
    description: str | None = None
    tags: list[str] = Field(default_factory=list)
    return_char_limit: int = Field(default=50_000, ge=1)
    source_type: Literal["python"] = "python"
    json_schema: dict[str, Any] | None = None


class ToolUpdate(_Body):
    source_code: str | None = Field(default=None, min_length=1)
    description: str | None = None
    tags: list[str] | None = None
    return_char_limit: int | None = Field(default=None, ge=1)


class ToolPublic(BaseModel):
    id: str
    name: str
    description: str
    tool_type: str
    source_type: str | None
    source_code: str | None
    json_schema: dict[str, Any]
    tags: list[str]
    return_char_limit: int
    metadata_: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, tool: Tool) -> ToolPublic:
        return cls(
            id=tool.id,
            name=tool.name,
            description=tool.description,
            tool_type=tool.tool_type.value,
            source_type="python" if tool.source_code else None,
            source_code=tool.source_code,
            json_schema=tool.json_schema,
            tags=list(tool.tags),
            return_char_limit=tool.return_char_limit,
            metadata_=tool.metadata,
            created_at=tool.created_at,
            updated_at=tool.updated_at,
        )


def llm_config_from(
    model: str | None,
    body: LLMConfigBody | None,
    *,
    max_tokens: int | None = None,
    context_window: int | None = None,
) -> LLMConfig:
    """Our LLMConfig from Letta's ``model`` handle and/or ``llm_config``; one of them is required."""
    handle = model or (body.handle if body else None)
    if handle is None and body is not None:
        if "/" in body.model:
            handle = body.model
        elif body.model_endpoint_type in {p.value for p in Provider}:
            handle = f"{body.model_endpoint_type}/{body.model}"
        else:
            raise InvalidInput(
                "llm_config.model_endpoint_type must be anthropic or openai (or give model as provider/model-name)",
                field="llm_config",
            )
    if handle is None:
        raise InvalidInput(
            "model is required, as provider/model-name (e.g. anthropic/claude-3-5-haiku-20241022)", field="model"
        )
    provider, name = parse_model_handle(handle)
    return LLMConfig(
        provider=provider,
        model=name,
        context_window=context_window or (body.context_window if body else DEFAULT_CONTEXT_WINDOW),
        max_tokens=max_tokens or (body.max_tokens if body and body.max_tokens else DEFAULT_MAX_TOKENS),
        temperature=body.temperature if body else None,
    )


class AgentCreate(_Body):
    """Letta's CreateAgentRequest, the parts nightshift uses."""

    name: str | None = None
    system: str | None = None
    description: str | None = None
    model: str | None = None
    llm_config: LLMConfigBody | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    context_window_limit: int | None = Field(default=None, ge=1)
    embedding: str | None = None
    memory_blocks: list[BlockCreate] = Field(default_factory=list)
    block_ids: list[str] = Field(default_factory=list)
    tool_ids: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    include_base_tools: bool = True
    tool_rules: list[ToolRule] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None
    message_buffer_autoclear: bool = False
    secrets: dict[str, str] | None = Field(
        default=None, description="Environment variables of the agent's tool calls; responses never show the values"
    )
    tool_exec_environment_variables: dict[str, str] | None = Field(
        default=None, description="Letta's older name for secrets"
    )

    @field_validator("memory_blocks", "block_ids", "tool_ids", "tools", "tool_rules", "tags", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    def given_secrets(self) -> dict[str, str]:
        return secrets_of(self.secrets, self.tool_exec_environment_variables) or {}


class AgentUpdate(_Body):
    """Letta's UpdateAgent: every field optional; absent fields stay as they are."""

    name: str | None = None
    system: str | None = None
    description: str | None = None
    model: str | None = None
    llm_config: LLMConfigBody | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    embedding: str | None = None
    block_ids: list[str] | None = None
    tool_ids: list[str] | None = None
    tool_rules: list[ToolRule] | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    message_buffer_autoclear: bool | None = None
    secrets: dict[str, str] | None = Field(
        default=None, description="Replaces the agent's secrets (environment variables of its tool calls)"
    )
    tool_exec_environment_variables: dict[str, str] | None = Field(
        default=None, description="Letta's older name for secrets"
    )


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


class MemoryPublic(BaseModel):
    blocks: list[BlockPublic]


class AgentPublic(BaseModel):
    id: str
    name: str
    system: str
    description: str | None
    agent_type: str = "memgpt_v2_agent"
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
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, agent: Agent) -> AgentPublic:
        config = agent.llm_config
        blocks = [BlockPublic.of(b) for b in agent.blocks]
        secrets = [AgentSecretPublic(agent_id=agent.id, key=key) for key in sorted(agent.secrets)]
        return cls(
            id=agent.id,
            name=agent.name,
            system=agent.system,
            description=agent.description,
            model=config.handle,
            llm_config=LLMConfigPublic(
                model=config.model,
                model_endpoint_type=config.provider.value,
                context_window=config.context_window,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
                handle=config.handle,
            ),
            embedding=agent.embedding,
            memory=MemoryPublic(blocks=blocks),
            blocks=blocks,
            tools=[ToolPublic.of(t) for t in agent.tools],
            tool_rules=dump_tool_rules(agent.tool_rules),
            tags=list(agent.tags),
            metadata=agent.metadata,
            message_ids=list(agent.message_ids),
            message_buffer_autoclear=agent.message_buffer_autoclear,
            secrets=secrets,
            tool_exec_environment_variables=secrets,
            created_at=agent.created_at,
            updated_at=agent.updated_at,
        )
