"""Agents as JSON bytes in AgentPublic's shape, written straight from the domain objects.

A page of 50 agents is about 430 KB of JSON, mostly the same ten tools with their JSON schemas
again for each agent. Building the ``AgentPublic`` models (each field validated) and having
FastAPI validate and serialize them again cost 1.35 ms of CPU for such a page; the plain dicts
below, serialized by orjson with each tool's JSON written once per response and spliced in
wherever the tool appears (``orjson.Fragment``), 0.22 ms. The routes keep ``AgentPublic`` as
their response model, so the OpenAPI schema is unchanged, and ``tests/unit/test_agent_json.py``
checks that these bytes are the ones pydantic writes for ``AgentPublic``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import orjson
from fastapi import Response
from pydantic import TypeAdapter

from nightshift.api.schemas import AgentPublic, AgentRelation
from nightshift.domain.agents import Agent
from nightshift.domain.blocks import Block
from nightshift.domain.tool_rules import dump_tool_rules
from nightshift.domain.tools import Tool

# Datetimes in UTC end with "Z", as pydantic writes them.
_OPTIONS = orjson.OPT_UTC_Z


def agent_response(agent: Agent, *, include: Collection[AgentRelation] | None = None) -> Response:
    """``agent`` as AgentPublic's JSON; ``include`` as for :meth:`AgentPublic.of`."""
    try:
        content = orjson.dumps(_agent(agent, {}, include), option=_OPTIONS)
    except TypeError:  # a value orjson refuses (none is expected from stored data): pydantic's way
        content = _ONE.dump_json(AgentPublic.of(agent, include=include))
    return Response(content, media_type="application/json")


def agents_response(agents: Iterable[Agent], *, include: Collection[AgentRelation] | None = None) -> Response:
    """A list of agents as ``list[AgentPublic]``'s JSON; a tool they share is serialized once."""
    agents = list(agents)
    tools: dict[str, orjson.Fragment] = {}
    try:
        content = orjson.dumps([_agent(agent, tools, include) for agent in agents], option=_OPTIONS)
    except TypeError:
        content = _MANY.dump_json(AgentPublic.many(agents, include=include))
    return Response(content, media_type="application/json")


_ONE = TypeAdapter(AgentPublic)
_MANY = TypeAdapter(list[AgentPublic])


def _agent(agent: Agent, tools: dict[str, orjson.Fragment], include: Collection[AgentRelation] | None) -> Any:
    def wanted(relation: AgentRelation) -> bool:
        return include is None or relation in include

    config = agent.llm_config
    blocks = orjson.Fragment(
        orjson.dumps([_block(b) for b in agent.blocks] if wanted("agent.blocks") else [], option=_OPTIONS)
    )
    secrets = (
        [{"agent_id": agent.id, "key": key, "value": ""} for key in sorted(agent.secrets)]
        if wanted("agent.secrets")
        else []
    )
    shown_tools = []
    for tool in agent.tools if wanted("agent.tools") else ():
        if tool.id not in tools:
            tools[tool.id] = orjson.Fragment(orjson.dumps(_tool(tool), option=_OPTIONS))
        shown_tools.append(tools[tool.id])
    # The keys in AgentPublic's order of fields.
    return {
        "id": agent.id,
        "name": agent.name,
        "system": agent.system,
        "description": agent.description,
        "agent_type": "memgpt_v2_agent",
        "model": config.handle,
        "llm_config": {
            "model": config.model,
            "model_endpoint_type": config.provider,
            "context_window": config.context_window,
            "max_tokens": config.max_tokens,
            "temperature": config.temperature,
            "handle": config.handle,
            "parallel_tool_calls": config.parallel_tool_calls,
        },
        "embedding": agent.embedding,
        "embedding_config": None,
        "memory": {"blocks": blocks},
        "blocks": blocks,
        "tools": shown_tools,
        "sources": [],
        "tool_rules": dump_tool_rules(agent.tool_rules),
        "tags": list(agent.tags) if wanted("agent.tags") else [],
        "metadata": agent.metadata,
        "message_ids": list(agent.message_ids),
        "message_buffer_autoclear": agent.message_buffer_autoclear,
        "secrets": secrets,
        "tool_exec_environment_variables": secrets,
        "created_at": agent.created_at,
        "updated_at": agent.updated_at,
    }


def _block(block: Block) -> dict[str, Any]:
    """BlockPublic's fields, in its order."""
    return {
        "id": block.id,
        "label": block.label,
        "value": block.value,
        "limit": block.limit,
        "description": block.description,
        "read_only": block.read_only,
        "metadata": block.metadata,
        "is_template": False,
        "created_at": block.created_at,
        "updated_at": block.updated_at,
    }


def _tool(tool: Tool) -> dict[str, Any]:
    """ToolPublic's fields, in its order."""
    return {
        "id": tool.id,
        "name": tool.name,
        "description": tool.description,
        "tool_type": tool.tool_type.value,
        "source_type": "python" if tool.source_code else None,
        "source_code": tool.source_code,
        "json_schema": tool.json_schema,
        "args_json_schema": tool.args_json_schema,
        "tags": list(tool.tags),
        "return_char_limit": tool.return_char_limit,
        "metadata_": tool.metadata,
        "created_at": tool.created_at,
        "updated_at": tool.updated_at,
    }
