"""Agents as JSON bytes in AgentPublic's shape, written straight from the domain objects.

A page of agents is mostly the same ten tools with their JSON schemas again for each agent.
Building the ``AgentPublic`` models (each field validated) and having FastAPI validate and
serialize them again costs several times what plain dicts serialized by orjson cost, with each
tool's JSON written once per response and spliced in wherever the tool appears
(``orjson.Fragment``). The dicts follow the schema models: a field the model and the domain type
share is copied, the model's own ones are named here (``_writer``). The routes keep
``AgentPublic`` as their response model, so the OpenAPI schema is unchanged, and
``tests/unit/test_agent_json.py`` checks that these bytes are the ones pydantic writes for it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import orjson
from fastapi import Response
from pydantic import BaseModel, TypeAdapter

from nightshift.api.input import copied_fields
from nightshift.api.schemas import (
    AgentPublic,
    AgentRelation,
    BlockPublic,
    agent_group_json,
    llm_config_fields,
)
from nightshift.api.tool_schemas import ToolPublic, tool_own
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


Writer = Callable[[Any, dict[str, Any]], dict[str, Any]]


def _writer(model: type[BaseModel], domain: type, own: Collection[str] = ()) -> Writer:
    """A function of (a ``domain`` object, the values of ``own``) giving ``model``'s fields, in its
    order: a field ``domain`` has under the same name as it is, one of ``own`` from the dict, any
    other its default. A required field that is none of these is a TypeError at import.

    Generated, as a dataclass's ``__init__`` is: a dict written out, the cost of one by hand.
    """
    copied = set(copied_fields(model, domain))
    scope: dict[str, Any] = {}
    items = []
    for name, spec in model.model_fields.items():
        if name in own:
            items.append(f"{name!r}: own[{name!r}]")
        elif name in copied:
            items.append(f"{name!r}: obj.{name}")
        elif not spec.is_required():
            scope[f"default_{name}"] = spec.get_default(call_default_factory=True)
            items.append(f"{name!r}: default_{name}")
        else:
            raise TypeError(f"{model.__name__}.{name} is not {domain.__name__}'s: give it")
    source = f"def write(obj, own):\n    return {{{', '.join(items)}}}\n"
    exec(compile(source, f"<writer {model.__name__}>", "exec"), scope)
    writer: Writer = scope["write"]
    return writer


# AgentPublic's own fields (the others are the agent's, or defaults): as in AgentPublic.of.
_AGENT_OWN = (
    "model",
    "llm_config",
    "memory",
    "blocks",
    "tools",
    "tool_rules",
    "tags",
    "secrets",
    "tool_exec_environment_variables",
    "enable_sleeptime",
    "managed_group",
    "multi_agent_group",
)
_write_agent = _writer(AgentPublic, Agent, _AGENT_OWN)
_write_block = _writer(BlockPublic, Block)
# The tool type is copied as it is: orjson writes an enum as its value.
_write_tool = _writer(ToolPublic, Tool, ("source_type", "metadata_"))
_NOTHING: dict[str, Any] = {}


def _agent(agent: Agent, tools: dict[str, orjson.Fragment], include: Collection[AgentRelation] | None) -> Any:
    def wanted(relation: AgentRelation) -> bool:
        return include is None or relation in include

    blocks = orjson.Fragment(
        orjson.dumps(
            [_write_block(b, _NOTHING) for b in agent.blocks] if wanted("agent.blocks") else [], option=_OPTIONS
        )
    )
    secrets = (
        [{"agent_id": agent.id, "key": key, "value": ""} for key in sorted(agent.secrets)]
        if wanted("agent.secrets")
        else []
    )
    group = agent_group_json(agent, include)
    shown_tools = []
    for tool in agent.tools if wanted("agent.tools") else ():
        if tool.id not in tools:
            tools[tool.id] = orjson.Fragment(orjson.dumps(_write_tool(tool, tool_own(tool)), option=_OPTIONS))
        shown_tools.append(tools[tool.id])
    own = {
        "model": agent.llm_config.handle,
        "llm_config": llm_config_fields(agent.llm_config),
        "memory": {"blocks": blocks},
        "blocks": blocks,
        "tools": shown_tools,
        "tool_rules": dump_tool_rules(agent.tool_rules),
        "tags": agent.tags if wanted("agent.tags") else [],
        "secrets": secrets,
        "tool_exec_environment_variables": secrets,
        "enable_sleeptime": agent.group is not None,
        "managed_group": group,
        "multi_agent_group": group,
    }
    return _write_agent(agent, own)
