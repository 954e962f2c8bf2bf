"""Agent Files (``.af``): Letta's portable document for agents, read and checked here.

An Agent File is one JSON object: ``agents`` (each with its settings, ``block_ids`` and
``tool_ids`` naming entries of the file, its ``messages`` and the ``in_context_message_ids``
among them), and the ``blocks`` and ``tools`` they name, with ids local to the file
(``agent-0``, ``block-1``, ``message-3``...). Letta's published files are double-encoded: the
file is a JSON string holding the document, and it is decoded twice, as Letta does.

Written by :mod:`nightshift.domain.agent_file_export`.

Everything here is pure: :func:`parse_agent_file` turns bytes into an :class:`AgentFile` or
raises ``InvalidInput`` naming what is wrong, before anything is written. Unknown fields are
ignored (Letta writes many that nightshift has no use for); parts that nightshift cannot hold
(files, folders, groups, MCP servers) are refused rather than dropped.

What a file would store meets the limits the API sets for the same fields (``domain/limits.py``:
sizes, and values the databases can hold), so an imported agent is one the API could have made.
A file may be as large as a request, and its reading is meant for a worker thread: the JSON is
read in small calls (``domain/json_reader.py``) and the file's agents, blocks, tools and messages
are checked one at a time, so that the interpreter can switch to the event loop between them.
No call checks a larger part than ``MAX_FIELD_ENTRIES`` bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nightshift.domain.groups import check_frequency, check_manager_type
from nightshift.domain.json_reader import JSONTooDeep, read_json
from nightshift.domain.limits import (
    DEFAULT_BLOCK_LIMIT,
    MAX_BLOCK_LIMIT,
    MAX_CONTEXT_WINDOW,
    MAX_JSON_DEPTH,
    MAX_LIST_ITEMS,
    MAX_MESSAGE_PARTS,
    MAX_NAME_CHARS,
    MAX_OUTPUT_TOKENS,
    MAX_RETURN_CHARS,
    MAX_SOURCE_CHARS,
    MAX_TAGS,
    MAX_TEXT_CHARS,
    StorageProblem,
    storage_problem,
)
from nightshift.errors import InvalidInput

MAX_FILE_AGENTS = 1000
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
# Nesting of the file: an agent's metadata sits two levels below the top (``agents.0.metadata``), a
# message's parts four (``agents.0.messages.3.content``), where an API body holds them at the top;
# each part is then held to the API's own ``MAX_JSON_DEPTH`` from there.
MAX_FILE_DEPTH = MAX_JSON_DEPTH + 4
# Entries of one list or object field of an agent, block, tool or message. Each of those is checked
# in one call that holds the interpreter; the file's agents, blocks and tools, and an agent's
# messages, are checked one by one and are not bounded by this.
MAX_FIELD_ENTRIES = 10_000

# The API's limits on the same fields (``api/schemas.py``), for what a file would store.
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Label = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Tags = Annotated[list[Name], Field(max_length=MAX_TAGS)]
Ids = Annotated[list[str], Field(max_length=MAX_LIST_ITEMS)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FileBlock(_Part):
    """A block of the file, shared by every agent that names its id."""

    id: str
    label: Label
    value: Text = ""
    limit: int = Field(default=DEFAULT_BLOCK_LIMIT, ge=1, le=MAX_BLOCK_LIMIT)
    description: Text | None = None
    read_only: bool = False
    metadata: dict[str, Any] | None = None


class FileTool(_Part):
    """A tool of the file: a custom tool carries its Python source; a built-in one only its name."""

    id: str
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    tool_type: str = "custom"
    description: Text | None = None
    source_code: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS)
    json_schema: dict[str, Any] | None = None
    tags: Tags | None = None
    return_char_limit: int = Field(default=50_000, ge=1, le=MAX_RETURN_CHARS)


class FileFunction(_Part):
    """The function a tool call names, with its arguments as JSON text."""

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    arguments: Text = ""


class FileToolCall(_Part):
    """One tool call of an assistant message (OpenAI's shape, as Letta stores it)."""

    id: str = Field(min_length=1)
    function: FileFunction


class FileContent(_Part):
    """One content part: ``text`` parts are the message's text, ``reasoning`` parts its reasoning."""

    type: str
    text: Text | None = None
    reasoning: Text | None = None


class FileToolReturn(_Part):
    """A tool's return as Letta records it beside a tool message."""

    tool_call_id: str | None = None
    status: str | None = None
    func_response: Text | None = None


class FileMessage(_Part):
    """A message of an agent, in the order the file lists them."""

    id: str
    role: str
    content: Annotated[list[FileContent], Field(max_length=MAX_MESSAGE_PARTS)] | Text | None = None
    name: Name | None = None
    tool_calls: Annotated[list[FileToolCall], Field(max_length=MAX_LIST_ITEMS)] | None = None
    tool_call_id: str | None = None
    tool_returns: list[FileToolReturn] | None = None
    created_at: datetime | None = None

    def text(self) -> str:
        """The text parts joined (a plain string content as it is), or a tool message's return."""
        if isinstance(self.content, str):
            return self.content
        texts = [p.text for p in self.content or [] if p.type == "text" and p.text is not None]
        if not texts and self.role == "tool":
            texts = [r.func_response for r in self.tool_returns or [] if r.func_response is not None][:1]
        return "\n".join(texts)

    def reasoning(self) -> str | None:
        """The reasoning parts joined, if any."""
        if isinstance(self.content, str):
            return None
        parts = [p.reasoning for p in self.content or [] if p.type == "reasoning" and p.reasoning]
        return "\n".join(parts) if parts else None

    def answered_call(self) -> str | None:
        """The call a tool message answers: its ``tool_call_id``, else the one its return names."""
        if self.tool_call_id:
            return self.tool_call_id
        return next((r.tool_call_id for r in self.tool_returns or [] if r.tool_call_id), None)

    def is_error(self) -> bool:
        """Whether a tool message reports a failed call."""
        return any(r.status == "error" for r in self.tool_returns or [])


class FileLLMConfig(_Part):
    """The part of Letta's llm_config that nightshift keeps."""

    model: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    model_endpoint_type: Name | None = None
    handle: Name | None = None
    context_window: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_WINDOW)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)
    parallel_tool_calls: bool | None = None


class FileAgent(_Part):
    """An agent of the file."""

    id: str
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    system: Text | None = None
    description: Text | None = None
    agent_type: str | None = None
    model: Name | None = None
    llm_config: FileLLMConfig | None = None
    embedding: Name | None = None
    block_ids: Ids = Field(default_factory=list)
    tool_ids: Ids = Field(default_factory=list)
    tool_rules: Annotated[list[dict[str, Any]], Field(max_length=MAX_LIST_ITEMS)] | None = None
    tags: Tags | None = None
    metadata: dict[str, Any] | None = None
    include_base_tools: bool = True
    message_buffer_autoclear: bool = False
    messages: list[FileMessage] = Field(default_factory=list)
    in_context_message_ids: list[str] = Field(default_factory=list)
    tool_exec_environment_variables: dict[str, str | None] | None = None
    secrets: dict[str, str | None] | None = None
    memory_blocks: list[Any] | None = None
    tools: list[Any] | None = None
    source_ids: list[Any] | None = None
    folder_ids: list[Any] | None = None
    files_agents: list[Any] | None = None
    group_ids: list[Any] | None = None

    def secret_names(self) -> list[str]:
        """The names of the tool secrets the agent expects (their values are never in a file)."""
        return list(dict.fromkeys([*(self.tool_exec_environment_variables or {}), *(self.secrets or {})]))


class FileManagerConfig(_Part):
    """A group's manager: its type (nightshift imports sleep-time groups), main agent and frequency."""

    manager_type: str = "round_robin"
    manager_agent_id: str | None = None
    sleeptime_agent_frequency: int | None = None


class FileGroup(_Part):
    """A group of the file: its agents and main agent by their file ids.

    ``shared_block_ids`` that are not the file's blocks are left out on import: Letta's export
    writes its own database's block ids there (it maps a group's agents to the file's ids, not
    its blocks), which name nothing here.
    """

    id: str
    agent_ids: Ids = Field(default_factory=list)
    description: Text = ""
    manager_config: FileManagerConfig = Field(default_factory=FileManagerConfig)
    shared_block_ids: Ids = Field(default_factory=list)
    hidden: bool | None = None


class AgentFile(_Part):
    """A whole Agent File."""

    agents: list[FileAgent] = Field(default_factory=list)
    blocks: list[FileBlock] = Field(default_factory=list)
    tools: list[FileTool] = Field(default_factory=list)
    groups: list[FileGroup] = Field(default_factory=list)
    files: list[Any] = Field(default_factory=list)
    sources: list[Any] = Field(default_factory=list)
    mcp_servers: list[Any] = Field(default_factory=list)


def decode_agent_file(raw: bytes) -> dict[str, Any]:
    """The document of an Agent File: JSON, decoded a second time when it holds a JSON string.

    Meant for a worker thread: the JSON is read in small calls (see ``domain/json_reader.py``).

    Raises:
        InvalidInput: (field ``file``) not JSON, nested deeper than ``MAX_FILE_DEPTH``, or not an
            object with an ``agents`` list.
    """
    try:
        document: Any = read_json(raw, max_depth=MAX_FILE_DEPTH)
        if isinstance(document, str):
            document = read_json(document, max_depth=MAX_FILE_DEPTH)  # double-encoded, as Letta publishes them
    except JSONTooDeep as exc:
        where = StorageProblem(path=exc.path, reason="").where or "its top"
        raise _problem(
            f"{where}: nested more than {exc.max_depth} levels deep; the API keeps JSON within "
            f"{MAX_JSON_DEPTH} levels of the field that holds it"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"the agent file is not JSON: {exc}", field="file") from None
    if not isinstance(document, dict) or not isinstance(document.get("agents"), list):
        raise InvalidInput(
            "not an Agent File: expected a JSON object with an 'agents' list (Letta's legacy single-agent "
            "format is not supported)",
            field="file",
        )
    return document


def parse_agent_file(raw: bytes) -> AgentFile:
    """Read and check an Agent File; meant for a worker thread (see the module's docstring).

    Raises:
        InvalidInput: (field ``file``) what is wrong with it, with its place in the document.
    """
    parsed = _validated(decode_agent_file(raw))
    check_agent_file(parsed)
    return parsed


_Model = TypeVar("_Model", bound=_Part)


def _place(path: tuple[str | int, ...]) -> str:
    return StorageProblem(path=path, reason="").where


def _part(model: type[_Model], given: Any, path: tuple[str | int, ...]) -> _Model:
    """One part of the file, validated and held to the API's limits, or ``InvalidInput`` naming
    its field by its place in the file."""
    if isinstance(given, dict):
        for key, value in given.items():
            if isinstance(value, list | dict) and len(value) > MAX_FIELD_ENTRIES:
                raise _problem(
                    f"{_place((*path, key))}: holds {len(value)} entries; a field of an agent, block, tool "
                    f"or message holds at most {MAX_FIELD_ENTRIES}"
                )
    try:
        part = model.model_validate(given)
    except ValidationError as exc:
        problems = [f"{_place((*path, *e['loc'])) or 'the document'}: {e['msg']}" for e in exc.errors()[:5]]
        raise _problem("; ".join(problems)) from None
    # Held as an API body holds the same fields: its own depth counts from the part itself.
    problem = storage_problem(part)
    if problem is not None:
        raise _problem(f"{_place((*path, *problem.path))}: {problem.reason}")
    return part


def _parts(model: type[_Model], document: dict[str, Any], key: str) -> list[_Model]:
    given = document.get(key, [])
    if not isinstance(given, list):
        raise _problem(f"{key}: expected a list")
    return [_part(model, item, (key, index)) for index, item in enumerate(given)]


def _agent_part(given: Any, index: int) -> FileAgent:
    """An agent with its messages, checked one message at a time.

    Each message the file gave is let go once checked: freeing a whole document at once is one
    call into C as long as building it was, which the interpreter does not interrupt.
    """
    messages = given.get("messages") if isinstance(given, dict) else None
    if not isinstance(messages, list):
        return _part(FileAgent, given, ("agents", index))
    agent = _part(FileAgent, {**given, "messages": []}, ("agents", index))
    checked: list[FileMessage] = []
    for position in range(len(messages)):
        message, messages[position] = messages[position], None
        checked.append(_part(FileMessage, message, ("agents", index, "messages", position)))
    return agent.model_copy(update={"messages": checked})


def _validated(document: dict[str, Any]) -> AgentFile:
    """The file's parts, checked; the document's messages are let go meanwhile (see ``_agent_part``)."""
    agents = document["agents"]
    if not agents:
        raise _problem("agents: the file holds no agents")
    if len(agents) > MAX_FILE_AGENTS:
        raise _problem(f"agents: the file holds {len(agents)} agents; an import takes at most {MAX_FILE_AGENTS}")
    rest = _part(AgentFile, {**document, "agents": [], "blocks": [], "tools": [], "groups": []}, ())
    return rest.model_copy(
        update={
            "agents": [_agent_part(given, index) for index, given in enumerate(agents)],
            "blocks": _parts(FileBlock, document, "blocks"),
            "tools": _parts(FileTool, document, "tools"),
            "groups": _parts(FileGroup, document, "groups"),
        }
    )


def _problem(message: str) -> InvalidInput:
    return InvalidInput(f"invalid agent file: {message}", field="file")


def _check_unique(kind: str, ids: Sequence[str], seen: set[str]) -> None:
    for entity_id in ids:
        if entity_id in seen:
            raise _problem(f"the id {entity_id!r} ({kind}) is used twice")
        seen.add(entity_id)


def check_agent_file(document: AgentFile) -> None:
    """Refuse a file whose parts do not fit together or that holds what nightshift cannot import.

    Checked: ids are unique; every block, tool and in-context message an agent names is in the
    file; the in-context window starts with a system message; every in-context tool result
    answers a call made before it; groups are sleep-time groups of the file's agents; no files,
    folders or MCP servers.

    Raises:
        InvalidInput: (field ``file``) the first problem found.
    """
    for part in ("files", "sources", "mcp_servers"):
        if getattr(document, part):
            raise _problem(f"it holds {part}, which nightshift does not support; export the agents without them")
    seen: set[str] = set()
    _check_unique("agent", [a.id for a in document.agents], seen)
    _check_unique("block", [b.id for b in document.blocks], seen)
    _check_unique("tool", [t.id for t in document.tools], seen)
    _check_unique("group", [g.id for g in document.groups], seen)
    block_ids = {b.id for b in document.blocks}
    tool_ids = {t.id for t in document.tools}
    _check_groups(document)
    group_ids = {g.id for g in document.groups}
    for agent in document.agents:
        where = f"agent {agent.id} ({agent.name!r})"
        unknown = [i for i in agent.group_ids or () if i not in group_ids]
        if unknown:
            raise _problem(f"{where} names groups the file does not hold: {', '.join(map(str, unknown))}")
        for part in ("source_ids", "folder_ids", "files_agents", "memory_blocks", "tools"):
            if getattr(agent, part):
                raise _problem(
                    f"{where} has {part}, which an agent file import does not support"
                    + ("; list them in the file's blocks and tools" if part in ("memory_blocks", "tools") else "")
                )
        missing_blocks = [i for i in agent.block_ids if i not in block_ids]
        if missing_blocks:
            raise _problem(f"{where} names blocks the file does not hold: {', '.join(missing_blocks)}")
        missing_tools = [i for i in agent.tool_ids if i not in tool_ids]
        if missing_tools:
            raise _problem(f"{where} names tools the file does not hold: {', '.join(missing_tools)}")
        _check_messages(agent, where, seen)


def _check_groups(document: AgentFile) -> None:
    """Each group is a sleep-time group of agents of the file (a 422 naming another manager type)."""
    agent_ids = {a.id for a in document.agents}
    managers: set[str] = set()
    for group in document.groups:
        where = f"group {group.id}"
        try:
            check_manager_type(group.manager_config.manager_type)
            check_frequency(group.manager_config.sleeptime_agent_frequency)
        except InvalidInput as exc:
            raise _problem(f"{where}: {exc.message}") from None
        manager = group.manager_config.manager_agent_id
        if manager is None or manager not in agent_ids:
            raise _problem(f"{where}: its manager_agent_id must be an agent of the file, got {manager!r}")
        missing = [i for i in group.agent_ids if i not in agent_ids]
        if missing:
            raise _problem(f"{where} names agents the file does not hold: {', '.join(missing)}")
        if not group.agent_ids or manager in group.agent_ids:
            raise _problem(f"{where}: its agent_ids must name its sleep-time agents, without its manager")
        if manager in managers:
            raise _problem(f"{where}: agent {manager} manages another group of the file already")
        managers.add(manager)


def _check_messages(agent: FileAgent, where: str, seen: set[str]) -> None:
    _check_unique(f"message of {where}", [m.id for m in agent.messages], seen)
    by_id = {m.id: m for m in agent.messages}
    for message in agent.messages:
        if message.role not in MESSAGE_ROLES:
            raise _problem(
                f"message {message.id} of {where} has role {message.role!r}; nightshift holds "
                f"{', '.join(MESSAGE_ROLES)} messages"
            )
        if message.role == "tool" and not message.answered_call():
            raise _problem(f"tool message {message.id} of {where} has no tool_call_id")
    missing = [i for i in agent.in_context_message_ids if i not in by_id]
    if missing:
        raise _problem(f"{where} has in-context message ids the file does not hold: {', '.join(missing)}")
    if len(set(agent.in_context_message_ids)) != len(agent.in_context_message_ids):
        raise _problem(f"{where} lists a message twice in its in-context window")
    window = [by_id[i] for i in agent.in_context_message_ids]
    if window and window[0].role != "system":
        raise _problem(f"{where}: the in-context window must start with the system message, not {window[0].role}")
    if any(m.role == "system" for m in window[1:]):
        raise _problem(f"{where}: the in-context window holds a second system message")
    called: dict[str, str] = {}
    answered: set[str] = set()
    for message in window:
        called.update((c.id, message.id) for c in message.tool_calls or [])
        answer = message.answered_call()
        if message.role == "tool" and answer not in called:
            raise _problem(
                f"{where}: in-context tool message {message.id} answers call {answer!r}, "
                "which no earlier in-context assistant message made"
            )
        if message.role == "tool" and answer is not None:
            answered.add(answer)
    unanswered = [f"{call} (message {made_in})" for call, made_in in called.items() if call not in answered]
    if unanswered:
        raise _problem(
            f"{where}: in-context tool calls without their result: {', '.join(unanswered)}; a provider "
            "refuses a conversation with a call left unanswered"
        )
