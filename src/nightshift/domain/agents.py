"""Agents: persistent state the model is run against, step after step."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from nightshift.domain.blocks import Block
from nightshift.domain.fast_init import fast_init
from nightshift.domain.groups import Group
from nightshift.domain.tool_rules import ToolRule
from nightshift.domain.tools import Tool
from nightshift.errors import InvalidInput

DEFAULT_CONTEXT_WINDOW = 200_000
MAX_SECRETS = 100
MAX_SECRET_BYTES = 64 * 1024
_SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
DEFAULT_MAX_TOKENS = 4096


class AgentType(StrEnum):
    """Which loop an agent runs (Letta's ``agent_type``); fixed at creation, changed only by an update.

    The memgpt loops: every tool gets ``inner_thoughts`` and ``request_heartbeat`` arguments, the
    model must call a tool, it speaks through ``send_message`` and is stepped again only when it
    asks. The letta_v1 loop: tools as they are, the model may answer in text (its reply, which
    ends the turn), and every tool call gets its result back in another step.
    """

    MEMGPT = "memgpt_agent"  # the memgpt loop, the original tool set
    MEMGPT_V2 = "memgpt_v2_agent"  # the memgpt loop; agents stored before types were kept have it
    LETTA_V1 = "letta_v1_agent"  # the letta_v1 loop; Letta's default for a new agent
    REACT = "react_agent"  # not run by nightshift: refused
    WORKFLOW = "workflow_agent"  # not run by nightshift: refused
    SPLIT_THREAD = "split_thread_agent"  # not run by nightshift: refused
    SLEEPTIME = "sleeptime_agent"  # the letta_v1 loop, made with its main agent (domain/groups.py)
    VOICE_CONVO = "voice_convo_agent"  # not run by nightshift: refused
    VOICE_SLEEPTIME = "voice_sleeptime_agent"  # not run by nightshift: refused

    @property
    def heartbeats(self) -> bool:
        """Whether the agent runs the memgpt loop (agent arguments, forced tool calls, heartbeats)."""
        return self in (AgentType.MEMGPT, AgentType.MEMGPT_V2)


SUPPORTED_AGENT_TYPES = (AgentType.MEMGPT, AgentType.MEMGPT_V2, AgentType.LETTA_V1, AgentType.SLEEPTIME)


def check_agent_type(value: str, *, field_name: str = "agent_type") -> AgentType:
    """The agent type named, or InvalidInput naming the types nightshift runs.

    Letta's other types (react, workflow, voice, split thread) run loops nightshift does not
    have: they are refused rather than run as another loop.
    """
    supported = ", ".join(t.value for t in SUPPORTED_AGENT_TYPES)
    try:
        agent_type = AgentType(value)
    except ValueError:
        raise InvalidInput(f"unknown agent_type {value!r}; nightshift runs {supported}", field=field_name) from None
    if agent_type not in SUPPORTED_AGENT_TYPES:
        raise InvalidInput(f"agent_type {value!r} is not supported; nightshift runs {supported}", field=field_name)
    return agent_type


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LLMConfig:
    """Which model an agent runs on and with what limits.

    ``provider`` names a registered provider (``nightshift.providers.registry``), checked where a
    model handle enters (the API); the domain does not know the providers. With
    ``parallel_tool_calls`` the model may call several tools in one turn (Letta's and OpenAI's
    name); without it, one per turn.
    """

    provider: str
    model: str
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    parallel_tool_calls: bool = True

    @property
    def handle(self) -> str:
        """``provider/model``, as users write it."""
        return f"{self.provider}/{self.model}"


def check_secrets(secrets: Mapping[str, str], *, field_name: str = "secrets") -> dict[str, str]:
    """An agent's tool secrets as given, or InvalidInput saying what is wrong with them.

    They become environment variables of the agent's tool calls, so names are variable names.
    """
    if len(secrets) > MAX_SECRETS:
        raise InvalidInput(f"at most {MAX_SECRETS} secrets per agent, got {len(secrets)}", field=field_name)
    for name, value in secrets.items():
        if not _SECRET_NAME.fullmatch(name):
            raise InvalidInput(
                f"secret names are environment variable names (letters, digits, _; not starting with a digit; "
                f"at most 128 characters), got {name[:130]!r}",
                field=field_name,
            )
        if "\0" in value or len(value.encode("utf-8", "surrogatepass")) > MAX_SECRET_BYTES:
            raise InvalidInput(
                f"the value of secret {name!r} holds a NUL character or is over {MAX_SECRET_BYTES} bytes",
                field=field_name,
            )
    return dict(secrets)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    """An agent with its blocks and tools loaded.

    ``managed_group_id`` names the group the agent manages: its sleep-time agents'
    (``domain/groups.py``). ``message_ids`` is the in-context window: the ids of the messages the model sees, in order,
    the compiled system message first. ``context_tokens`` is the size of the request the window
    makes (the provider's count of the last one plus an estimate of what was added since; None
    until first counted). ``secrets`` are environment variables for the agent's
    custom tool calls: they never appear in responses or logs (not even in this object's repr).
    """

    id: str
    organization_id: str
    name: str
    system: str
    llm_config: LLMConfig
    agent_type: AgentType = AgentType.MEMGPT_V2
    description: str | None = None
    embedding: str | None = None
    blocks: tuple[Block, ...] = ()
    tools: tuple[Tool, ...] = ()
    tool_rules: tuple[ToolRule, ...] = ()
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    message_ids: tuple[str, ...] = ()
    context_tokens: int | None = None
    message_buffer_autoclear: bool = False
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    managed_group_id: str | None = None
    group: Group | None = None  # the group of ``managed_group_id``, loaded with the agent
    created_at: datetime
    updated_at: datetime

    def block(self, label: str) -> Block | None:
        """The block with this label, if the agent has one."""
        return next((b for b in self.blocks if b.label == label), None)

    def tool(self, name: str) -> Tool | None:
        """The attached tool with this name, if any."""
        return next((t for t in self.tools if t.name == name), None)
