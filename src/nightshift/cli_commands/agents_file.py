"""Read and check an agents file (YAML) before anything is sent to the server.

The file is either a list of agent bodies in the API's shape, or a mapping with ``agents:`` (that
list) and ``tools:`` (custom tools, each ``{source_code: ...}`` or ``{path: file.py}``, upserted
before the agents so that agents can name them). Every problem is reported as one line naming the
file, the entry and its line: ``agents.yaml: agent 3 (line 12): 'model' is required``.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from nightshift.api.schemas import AgentCreate
from nightshift.api.tool_schemas import ToolCreate
from nightshift.cli_commands.client import CommandFailed, dotted
from nightshift.errors import InvalidInput
from nightshift.providers.registry import parse_model

TOP_LEVEL_KEYS = ("tools", "agents")
TOOL_KEYS = ("source_code", "path", "description", "tags", "return_char_limit")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEntry:
    """One custom tool of the file: its body for ``PUT /v1/tools/`` and where it was written."""

    number: int
    line: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentEntry:
    """One agent of the file: its body for ``POST /v1/agents/`` and where it was written."""

    number: int
    line: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentsFile:
    """A checked agents file."""

    name: str
    tools: list[ToolEntry]
    agents: list[AgentEntry]

    def where(self, entry: ToolEntry | AgentEntry) -> str:
        """``agents.yaml: agent 3 (line 12)``: the prefix of a message about one entry."""
        kind = "tool" if isinstance(entry, ToolEntry) else "agent"
        return f"{self.name}: {kind} {entry.number} (line {entry.line})"


def load_agents_file(path: Path) -> AgentsFile:
    """Read, parse and check ``path``.

    Raises:
        CommandFailed: with one line saying what is wrong and where.
    """
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CommandFailed(f"{name}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise CommandFailed(f"{name}: not a text file (expected UTF-8 YAML)") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = error.problem or error.context or "cannot be parsed"
        raise CommandFailed(f"{name}:{where} not valid YAML ({problem})") from None
    except yaml.YAMLError as error:
        raise CommandFailed(f"{name}: not valid YAML ({error})") from None

    if root is None or data is None:
        raise CommandFailed(f"{name}: the file is empty (expected a list of agents)")
    if isinstance(data, list) and isinstance(root, yaml.SequenceNode):
        agent_nodes, agent_data = list(root.value), data
        tool_nodes: list[yaml.Node] = []
        tool_data: list[Any] = []
    elif isinstance(data, dict) and isinstance(root, yaml.MappingNode):
        unknown = [str(k) for k in data if k not in TOP_LEVEL_KEYS]
        if unknown:
            raise CommandFailed(
                f"{name}: line {_line(_value_node(root, unknown[0]) or root)}: unknown section {unknown[0]!r}"
                " (expected 'agents' and optionally 'tools')"
            )
        if "agents" not in data:
            raise CommandFailed(f"{name}: line {_line(root)}: an 'agents:' list is required")
        agent_nodes, agent_data = _section(name, root, data, "agents")
        tool_nodes, tool_data = _section(name, root, data, "tools") if data.get("tools") is not None else ([], [])
    else:
        raise CommandFailed(
            f"{name}: line {_line(root)}: expected a list of agents (or 'agents:' and 'tools:'), got {_kind(data)}"
        )
    if not agent_data:
        raise CommandFailed(f"{name}: no agents in the file")

    folder = path.parent
    tools = [
        _tool(name, folder, number, node, value)
        for number, (node, value) in enumerate(zip(tool_nodes, tool_data, strict=True), start=1)
    ]
    agents = [
        _agent(name, number, node, value)
        for number, (node, value) in enumerate(zip(agent_nodes, agent_data, strict=True), start=1)
    ]
    return AgentsFile(name=name, tools=tools, agents=agents)


def _section(name: str, root: yaml.MappingNode, data: dict[str, Any], key: str) -> tuple[list[yaml.Node], list[Any]]:
    node = _value_node(root, key)
    value = data[key]
    if not isinstance(value, list) or not isinstance(node, yaml.SequenceNode):
        line = _line(node or root)
        raise CommandFailed(f"{name}: line {line}: '{key}' must be a list, got {_kind(value)}")
    return list(node.value), value


def _tool(name: str, folder: Path, number: int, node: yaml.Node, value: Any) -> ToolEntry:
    where = _Where(name=name, kind="tool", number=number, node=node)
    if not isinstance(value, dict):
        raise where.failed(f"expected a mapping with 'source_code' or 'path', got {_kind(value)}")
    _reject_unknown(where, value, TOOL_KEYS)
    body = {k: v for k, v in value.items() if k != "path"}
    if ("source_code" in value) == ("path" in value):
        raise where.failed("give either 'source_code' or 'path' (a Python file)")
    if "path" in value:
        if not isinstance(value["path"], str):
            raise where.failed(f"'path' must be a file name, got {_kind(value['path'])}", at=["path"])
        try:
            body["source_code"] = (folder / value["path"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            raise where.failed(f"cannot read {value['path']!r} ({reason})", at=["path"]) from None
    _validate(where, ToolCreate, body)
    try:
        ast.parse(body["source_code"])
    except SyntaxError as error:
        raise where.failed(
            f"the source is not valid Python (line {error.lineno} of the source: {error.msg})", at=["source_code"]
        ) from None
    return ToolEntry(number=number, line=_line(node), body=body)


def _agent(name: str, number: int, node: yaml.Node, value: Any) -> AgentEntry:
    where = _Where(name=name, kind="agent", number=number, node=node)
    if not isinstance(value, dict):
        raise where.failed(f"expected a mapping of agent fields (name, model, ...), got {_kind(value)}")
    _reject_unknown(where, value, tuple(AgentCreate.model_fields))
    for field in ("name", "model"):
        if field == "model" and value.get("llm_config") is not None:
            continue
        if value.get(field) is None or value.get(field) == "":
            raise where.failed(f"'{field}' is required", at=[field])
    _validate(where, AgentCreate, value)
    if isinstance(value.get("model"), str):
        try:
            parse_model(value["model"])
        except InvalidInput as error:
            raise where.failed(error.message, at=["model"]) from None
    return AgentEntry(number=number, line=_line(node), body=value)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Where:
    """An entry of the file, to say where a problem is: ``agents.yaml: agent 3 (line 12)``."""

    name: str
    kind: str
    number: int
    node: yaml.Node

    def failed(self, problem: str, *, at: Sequence[Any] = ()) -> CommandFailed:
        """The error for ``problem``, at the line of the deepest part of ``at`` the entry has."""
        target = self.node
        for part in at:
            child = _child(target, part)
            if child is None:
                break
            target = child
        return CommandFailed(f"{self.name}: {self.kind} {self.number} (line {_line(target)}): {problem}")


def _validate(where: _Where, model: type[BaseModel], value: dict[str, Any]) -> None:
    """Check ``value`` against the API's own request schema; the first problem becomes the message."""
    try:
        model.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        loc = list(first["loc"])
        field = dotted(loc)
        if first["type"] == "missing":
            problem = f"'{field}' is required"
        else:
            message = first["msg"]
            problem = f"'{field}': {message[:1].lower()}{message[1:]}" if field else message
        raise where.failed(problem, at=loc) from None


def _reject_unknown(where: _Where, value: dict[str, Any], known: Sequence[str]) -> None:
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            article = "an" if where.kind == "agent" else "a"
            raise where.failed(f"{key!r} is not a field of {article} {where.kind}{hint}", at=[key])


def _child(node: yaml.Node, part: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        return _value_node(node, part)
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        child: yaml.Node = node.value[part]
        return child
    return None


def _value_node(node: yaml.MappingNode, key: Any) -> yaml.Node | None:
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(key):
            found: yaml.Node = value_node
            return found
    return None


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _kind(value: Any) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    if value is None:
        return "nothing"
    return kinds.get(type(value), type(value).__name__)
