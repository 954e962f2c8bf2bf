"""Agent Files (``.af``) written: nightshift's agents in Letta's layout, with ids local to the file.

The other half of :mod:`nightshift.domain.agent_files` (which reads them): pure, from domain
objects to the JSON document, with the file's own ids (``agent-0``, ``block-0``, ``message-0``...)
and secrets by name with empty values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nightshift.domain.agents import Agent
from nightshift.domain.blocks import Block
from nightshift.domain.groups import Group
from nightshift.domain.messages import Message, Role
from nightshift.domain.tool_rules import dump_tool_rules
from nightshift.domain.tools import Tool


def _tool_json(tool: Tool, file_id: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "tool_type": tool.tool_type.value,
        "description": tool.description,
        "source_type": "python",
        "name": tool.name,
        "tags": list(tool.tags),
        "source_code": tool.source_code,
        "json_schema": tool.json_schema,
        "args_json_schema": None,
        "return_char_limit": tool.return_char_limit,
        "pip_requirements": None,
        "npm_requirements": None,
        "default_requires_approval": None,
        "enable_parallel_execution": False,
        "metadata_": dict(tool.metadata),
    }


def _block_json(block: Block, file_id: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "label": block.label,
        "value": block.value,
        "limit": block.limit,
        "description": block.description,
        "read_only": block.read_only,
        "metadata": dict(block.metadata),
        "is_template": False,
        "template_name": None,
        "preserve_on_migration": False,
    }


def _message_json(message: Message, file_id: str, agent_file_id: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if message.reasoning:
        content.append({"type": "reasoning", "reasoning": message.reasoning, "is_native": False, "signature": None})
    if message.text or message.role is not Role.ASSISTANT:
        content.append({"type": "text", "text": message.text, "signature": None})
    tool_returns: list[dict[str, Any]] = []
    if message.role is Role.TOOL:
        tool_returns.append(
            {
                "tool_call_id": message.tool_call_id,
                "status": "error" if message.is_error else "success",
                "func_response": message.text,
                "stdout": None,
                "stderr": None,
            }
        )
    return {
        "type": "message",
        "id": file_id,
        "agent_id": agent_file_id,
        "role": message.role.value,
        "content": content,
        "name": message.name,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        or None,
        "tool_call_id": message.tool_call_id,
        "tool_returns": tool_returns,
        "created_at": message.created_at.isoformat(),
        "batch_item_id": None,
        "otid": None,
        "sender_id": None,
        "group_id": None,
        "model": None,
    }


def _group_json(
    group: Group, file_id: str, agent_ids: Mapping[str, str], block_ids: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "id": file_id,
        "agent_ids": [agent_ids[a] for a in group.agent_ids if a in agent_ids],
        "description": group.description,
        "manager_config": {
            "manager_type": group.manager_type.value,
            "manager_agent_id": agent_ids.get(group.manager_agent_id or ""),
            "sleeptime_agent_frequency": group.sleeptime_agent_frequency,
        },
        "shared_block_ids": [block_ids[b] for b in group.shared_block_ids if b in block_ids],
        "hidden": group.hidden,
        "project_id": None,
    }


def _llm_config_json(agent: Agent) -> dict[str, Any]:
    config = agent.llm_config
    return {
        "model": config.model,
        "model_endpoint_type": config.provider,
        "model_endpoint": None,
        "provider_name": config.provider,
        "handle": config.handle,
        "context_window": config.context_window,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "parallel_tool_calls": config.parallel_tool_calls,
        "put_inner_thoughts_in_kwargs": agent.agent_type.heartbeats,
    }


def export_agent_file(
    agents: Sequence[Agent],
    messages: Mapping[str, Sequence[Message]],
    *,
    groups: Sequence[Group] = (),
    created_at: datetime,
) -> dict[str, Any]:
    """The Agent File of ``agents`` with every one of their ``messages`` (by agent id, oldest first),
    and the ``groups`` among them (a main agent's sleep-time group).

    Ids become the file's own (``agent-0``, ``block-0``, ``tool-0``, ``message-0``... with blocks
    sorted by label and tools by name, as Letta writes them). Secrets keep their names, never
    their values.
    """
    blocks = sorted({b.id: b for a in agents for b in a.blocks}.values(), key=lambda b: (b.label, b.id))
    tools = sorted({t.id: t for a in agents for t in a.tools}.values(), key=lambda t: (t.name, t.id))
    block_ids = {b.id: f"block-{i}" for i, b in enumerate(blocks)}
    agent_ids = {a.id: f"agent-{i}" for i, a in enumerate(agents)}
    group_ids = {g.id: f"group-{i}" for i, g in enumerate(groups)}
    tool_ids = {t.id: f"tool-{i}" for i, t in enumerate(tools)}
    message_count = 0
    agents_json: list[dict[str, Any]] = []
    for index, agent in enumerate(agents):
        agent_file_id = f"agent-{index}"
        own = list(messages.get(agent.id, ()))
        message_ids = {m.id: f"message-{message_count + i}" for i, m in enumerate(own)}
        message_count += len(own)
        secret_names = dict.fromkeys(agent.secrets, "")
        agents_json.append(
            {
                "id": agent_file_id,
                "name": agent.name,
                "agent_type": agent.agent_type.value,
                "system": agent.system,
                "description": agent.description,
                "model": agent.llm_config.handle,
                "llm_config": _llm_config_json(agent),
                "embedding": agent.embedding,
                "embedding_config": None,
                "block_ids": [block_ids[b.id] for b in agent.blocks],
                "tool_ids": [tool_ids[t.id] for t in agent.tools],
                "tool_rules": dump_tool_rules(agent.tool_rules),
                "tags": list(agent.tags),
                "metadata": dict(agent.metadata),
                "include_base_tools": False,
                "include_multi_agent_tools": False,
                "include_base_tool_rules": False,
                "message_buffer_autoclear": agent.message_buffer_autoclear,
                "tool_exec_environment_variables": secret_names,
                "secrets": dict(secret_names),
                "memory_blocks": [],
                "tools": [],
                "source_ids": [],
                "files_agents": [],
                "group_ids": [group_ids[agent.managed_group_id]] if agent.managed_group_id in group_ids else [],
                "messages": [_message_json(m, message_ids[m.id], agent_file_id) for m in own],
                "in_context_message_ids": [message_ids[i] for i in agent.message_ids if i in message_ids],
            }
        )
    return {
        "agents": agents_json,
        "groups": [_group_json(g, group_ids[g.id], agent_ids, block_ids) for g in groups],
        "blocks": [_block_json(b, block_ids[b.id]) for b in blocks],
        "files": [],
        "sources": [],
        "tools": [_tool_json(t, tool_ids[t.id]) for t in tools],
        "mcp_servers": [],
        "metadata": {"exported_by": "nightshift"},
        "created_at": created_at.isoformat(),
    }
