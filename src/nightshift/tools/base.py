"""Base tools: sending messages, editing core memory, and searching recall and archival memory.

The memory tools come in Letta's three generations, all kept since agents of each exist:
``core_memory_append`` / ``core_memory_replace`` / ``rethink_memory``; ``memory_insert`` /
``memory_replace`` / ``memory_rethink`` / ``memory_finish_edits``; and the single ``memory`` tool
whose ``command`` picks the edit.

They run in-process against an ``AgentContext``: a working copy of one agent's memory for one
step. Memory edits change the copy; the caller writes every changed block of every agent of a
step in one statement afterwards. Edits that would pass a block's limit are refused with a
``ToolError`` the model can read: nothing is ever truncated silently.

Each function's first parameter is ``agent_state`` (injected, not shown to the model); the rest
of its signature and its docstring are the schema the model sees.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol

from nightshift.domain.agents import AgentType
from nightshift.domain.blocks import Block
from nightshift.domain.messages import Message, Role, inner_text, said_text
from nightshift.domain.passages import Passage
from nightshift.domain.tools import ToolType
from nightshift.errors import ToolError

SEARCH_PAGE_SIZE = 5


class MemorySearch(Protocol):
    """Read access to recall and archival memory, scoped to one agent by the caller."""

    async def messages(self, agent_id: str, query: str, *, limit: int, offset: int) -> list[Message]:
        """The agent's messages matching ``query``, best first."""
        ...

    async def passages(self, agent_id: str, query: str, *, limit: int, offset: int) -> list[Passage]:
        """The agent's archival passages matching ``query``, best first."""
        ...


@dataclass(slots=True, kw_only=True)
class AgentContext:
    """One agent's memory as the base tools see and change it during one step."""

    agent_id: str
    blocks: dict[str, Block]
    search: MemorySearch
    now: datetime  # what an edited block is stamped with: the step's time, from the caller's clock
    read_at: datetime | None = None  # when the model read this memory (its request was built), if known
    changed_labels: set[str] = field(default_factory=set)
    new_passages: list[str] = field(default_factory=list)

    def block(self, label: str) -> Block:
        """The block with ``label``, or a tool error naming the labels there are."""
        found = self.blocks.get(label)
        if found is None:
            known = ", ".join(sorted(self.blocks)) or "none"
            raise ToolError(f"no memory block labelled {label!r} (blocks: {known})")
        return found

    def set_value(self, label: str, value: str) -> None:
        """Replace a block's value, refusing read-only blocks and values over the limit."""
        block = self.block(label)
        if block.read_only:
            raise ToolError(f"memory block {label!r} is read-only")
        if len(value) > block.limit:
            raise ToolError(
                f"edit refused: block {label!r} would hold {len(value)} characters, over its limit of "
                f"{block.limit}. Shorten or summarise the content (the block now holds {len(block.value)})."
            )
        self.blocks[label] = replace(block, value=value, updated_at=self.now)
        self.changed_labels.add(label)

    def relabel(self, label: str, new_label: str | None, description: str | None) -> None:
        """Give a block a new label and/or description, refusing read-only blocks and taken labels."""
        block = self.block(label)
        if block.read_only:
            raise ToolError(f"memory block {label!r} is read-only")
        target = new_label or label
        if target != label and target in self.blocks:
            raise ToolError(f"there is already a memory block labelled {target!r}")
        changed = replace(
            block,
            label=target,
            description=block.description if description is None else description,
            updated_at=self.now,
        )
        del self.blocks[label]
        self.changed_labels.discard(label)
        self.blocks[target] = changed
        self.changed_labels.add(target)


def send_message(agent_state: AgentContext, message: str) -> str:
    """Send a message to the user.

    Args:
        message: The message to show the user, in your own voice.

    Returns:
        A confirmation.
    """
    return "Sent message successfully."


def core_memory_append(agent_state: AgentContext, label: str, content: str) -> str:
    """Append to the contents of a core memory block.

    Args:
        label: The label of the block to edit, e.g. human or persona.
        content: The text to append; it starts on a new line.

    Returns:
        A confirmation with the block's new size.
    """
    current = agent_state.block(label).value
    agent_state.set_value(label, f"{current}\n{content}" if current else content)
    return f"Appended to {label!r}; it now holds {len(agent_state.blocks[label].value)} characters."


def core_memory_replace(agent_state: AgentContext, label: str, old_content: str, new_content: str) -> str:
    """Replace a piece of text in a core memory block. To delete text, pass an empty new_content.

    Args:
        label: The label of the block to edit, e.g. human or persona.
        old_content: The exact text to replace; it must occur in the block.
        new_content: The text to put in its place.

    Returns:
        A confirmation with the block's new size.
    """
    current = agent_state.block(label).value
    if not old_content or old_content not in current:
        raise ToolError(f"old_content was not found in block {label!r}; copy it exactly from your memory")
    agent_state.set_value(label, current.replace(old_content, new_content))
    return f"Replaced text in {label!r}; it now holds {len(agent_state.blocks[label].value)} characters."


def rethink_memory(agent_state: AgentContext, new_memory: str, target_block_label: str) -> str:
    """Rewrite a whole core memory block, to reorganise it or fold in new insights.

    Args:
        new_memory: The complete new contents of the block.
        target_block_label: The label of the block to rewrite.

    Returns:
        A confirmation with the block's new size.
    """
    agent_state.set_value(target_block_label, new_memory)
    return f"Rewrote {target_block_label!r}; it now holds {len(new_memory)} characters."


# Line numbers may be shown next to a block to help the model point at a line; they are never
# part of its value, so an edit that carries them would write them into memory.
_LINE_NUMBER = re.compile(r"(^|\n)Line \d+: ")
_EDITED = (
    "Memory block {label!r} was edited; your system prompt now shows its new contents. Check that the "
    "change is what you meant (no repeated or missing lines) and edit again if it is not."
)


def _no_line_numbers(argument: str, text: str) -> None:
    if _LINE_NUMBER.search(text):
        raise ToolError(
            f"{argument} holds a line number prefix ('Line N: '); line numbers are only shown to you, "
            "leave them out of memory edits"
        )


def _replace_once(agent_state: AgentContext, label: str, old: str, new: str, argument: str) -> None:
    _no_line_numbers(argument, new)
    current = agent_state.block(label).value.expandtabs()
    old, new = old.expandtabs(), new.expandtabs()
    found = current.count(old) if old else 0
    if found == 0:
        raise ToolError(f"nothing was replaced: the text to replace does not occur exactly in block {label!r}")
    if found > 1:
        lines = [number for number, line in enumerate(current.split("\n"), start=1) if old in line]
        raise ToolError(
            f"nothing was replaced: the text to replace occurs {found} times in block {label!r} (lines {lines}); "
            "give more of the surrounding text so that it occurs once"
        )
    agent_state.set_value(label, current.replace(old, new))


def _insert_lines(agent_state: AgentContext, label: str, text: str, line: int) -> None:
    _no_line_numbers("the inserted text", text)
    lines = agent_state.block(label).value.expandtabs().split("\n")
    position = len(lines) if line == -1 else line
    if not 0 <= position <= len(lines):
        raise ToolError(
            f"insert_line {line} is outside block {label!r}: use 0 (before the first line) to {len(lines)} "
            "(after the last), or -1 for the end"
        )
    agent_state.set_value(label, "\n".join([*lines[:position], *text.expandtabs().split("\n"), *lines[position:]]))


def memory_replace(agent_state: AgentContext, label: str, old_str: str, new_str: str) -> str:
    """Replace one exact piece of text in a memory block with new text, for a precise edit.

    The text to replace must occur exactly once in the block. Do not use this to rewrite a whole
    block (use memory_rethink), and never include line numbers.

    Args:
        label: The label of the memory block to edit.
        old_str: The exact text to replace, whitespace included; it must occur once in the block.
        new_str: The text to put in its place (an empty string deletes the old text).

    Returns:
        A confirmation.
    """
    _replace_once(agent_state, label, old_str, new_str, "new_str")
    return _EDITED.format(label=label)


def memory_insert(agent_state: AgentContext, label: str, new_str: str, insert_line: int = -1) -> str:
    """Insert text into a memory block as new lines, after a given line.

    Args:
        label: The label of the memory block to edit.
        new_str: The text to insert, without line numbers.
        insert_line: The line after which to insert (0 puts it first); -1, the default, puts it at the end.

    Returns:
        A confirmation.
    """
    _insert_lines(agent_state, label, new_str, insert_line)
    return _EDITED.format(label=label)


_REPLACED_UNSEEN = (
    "Block {label!r} had been edited after you read it, and your rewrite replaced that edit; it held:\n{value}"
)


def memory_rethink(agent_state: AgentContext, label: str, new_memory: str) -> str:
    """Rewrite a whole memory block, to reorganise or condense it; for small edits use memory_replace or memory_insert.

    Args:
        label: The label of the memory block to rewrite.
        new_memory: The block's complete new contents, with what is still true of the old ones folded in.

    Returns:
        A confirmation.
    """
    _no_line_numbers("new_memory", new_memory)
    before = agent_state.block(label)
    agent_state.set_value(label, new_memory)
    read_at = agent_state.read_at
    edited_by_others = read_at is not None and read_at < before.updated_at < agent_state.now  # (this turn's: now)
    if edited_by_others and before.value != new_memory:
        # Someone else edited the block after the model read it: the rewrite wins, and what it
        # replaced stays on record in this result (a sleep-time agent's rewrite of a block its
        # main agent changed meanwhile, say).
        return f"{_EDITED.format(label=label)} {_REPLACED_UNSEEN.format(label=label, value=before.value)}"
    return _EDITED.format(label=label)


def memory_finish_edits(agent_state: AgentContext) -> str:
    """Say that you have finished editing your memory blocks.

    Returns:
        A confirmation.
    """
    return "Memory edits finished."


MemoryCommand = Literal["create", "str_replace", "insert", "delete", "rename"]
_MEMORY_PATH_PREFIX = "/memories/"


def _label_of(path: str | None, argument: str) -> str:
    if not path or not path.strip():
        raise ToolError(f"this command needs {argument}: the block's path, e.g. /memories/human")
    label = path.strip()
    label = label.removeprefix(_MEMORY_PATH_PREFIX).strip("/")
    if not label:
        raise ToolError(f"{argument} {path!r} names no block; write /memories/<label>")
    return label


def memory(
    agent_state: AgentContext,
    command: MemoryCommand,
    path: str | None = None,
    file_text: str | None = None,
    description: str | None = None,
    old_string: str | None = None,
    new_string: str | None = None,
    insert_line: int | None = None,
    insert_text: str | None = None,
    old_path: str | None = None,
    new_path: str | None = None,
) -> str:
    """Edit your memory blocks; the command says how, and a block's path is /memories/<label>.

    Commands: str_replace (path, old_string, new_string) replaces text that occurs once; insert
    (path, insert_text, insert_line) adds lines; rename (old_path and new_path, and/or path and
    description) renames a block or changes its description. Blocks are created and deleted
    through the API, not by this tool.

    Args:
        command: What to do: str_replace, insert or rename (create and delete are refused).
        path: The block to edit, as /memories/<label>.
        file_text: The contents of a new block (create).
        description: The block's new description (rename).
        old_string: The exact text to replace (str_replace); it must occur once in the block.
        new_string: The text to put in its place (str_replace); empty deletes the old text.
        insert_line: The line after which to insert (insert); 0 puts it first, -1 or nothing at the end.
        insert_text: The text to insert (insert).
        old_path: The block to rename (rename), as /memories/<label>.
        new_path: The block's new path (rename), as /memories/<new label>.

    Returns:
        A confirmation.
    """
    if command == "str_replace":
        label = _label_of(path, "path")
        if old_string is None or new_string is None:
            raise ToolError("str_replace needs old_string and new_string")
        _replace_once(agent_state, label, old_string, new_string, "new_string")
        return _EDITED.format(label=label)
    if command == "insert":
        label = _label_of(path, "path")
        if insert_text is None:
            raise ToolError("insert needs insert_text")
        _insert_lines(agent_state, label, insert_text, -1 if insert_line is None else insert_line)
        return _EDITED.format(label=label)
    if command == "rename":
        if old_path or new_path:
            label = _label_of(old_path, "old_path")
            new_label = _label_of(new_path, "new_path")
        else:
            label, new_label = _label_of(path, "path"), None
            if description is None:
                raise ToolError("rename needs old_path and new_path, or path and description")
        agent_state.relabel(label, new_label, description)
        return f"Memory block {label!r} is now {new_label or label!r}" + (
            "" if description is None else f", described as {description!r}."
        )
    if command in ("create", "delete"):
        raise ToolError(
            f"the {command} command is not available here: your memory blocks are created and deleted by your "
            "operator; edit the blocks you have with str_replace, insert or rename"
        )
    raise ToolError(f"unknown command {command!r}; use str_replace, insert or rename")


def archival_memory_insert(agent_state: AgentContext, content: str) -> str:
    """Save a passage to archival memory, to find it again later with archival_memory_search.

    Args:
        content: The text to save. Write it so that it makes sense on its own.

    Returns:
        A confirmation.
    """
    if not content.strip():
        raise ToolError("content is empty; there is nothing to save")
    agent_state.new_passages.append(content)
    return "Saved to archival memory."


async def archival_memory_search(agent_state: AgentContext, query: str, page: int = 0) -> str:
    """Search archival memory by words, best matches first.

    Args:
        query: The words to look for.
        page: Which page of results to return, starting at 0.

    Returns:
        The matching passages as JSON.
    """
    found = await agent_state.search.passages(
        agent_state.agent_id, query, limit=SEARCH_PAGE_SIZE, offset=max(page, 0) * SEARCH_PAGE_SIZE
    )
    results = [{"timestamp": p.created_at.isoformat(), "content": p.text} for p in found]
    return json.dumps({"page": page, "results": results})


async def conversation_search(agent_state: AgentContext, query: str, page: int = 0) -> str:
    """Search the whole conversation history (recall memory) by words, best matches first.

    Args:
        query: The words to look for.
        page: Which page of results to return, starting at 0.

    Returns:
        The matching messages as JSON.
    """
    found = await agent_state.search.messages(
        agent_state.agent_id, query, limit=SEARCH_PAGE_SIZE, offset=max(page, 0) * SEARCH_PAGE_SIZE
    )
    results = [
        {
            "timestamp": m.created_at.isoformat(),
            "role": m.role.value,
            "text": inner_text(m.text) if m.role is Role.TOOL else said_text(m),
        }
        for m in found
    ]
    return json.dumps({"page": page, "results": results})


BaseToolFunction = Callable[..., str] | Callable[..., Awaitable[str]]

BASE_TOOLS: dict[str, tuple[BaseToolFunction, ToolType]] = {
    "send_message": (send_message, ToolType.BASE),
    "conversation_search": (conversation_search, ToolType.BASE),
    "archival_memory_insert": (archival_memory_insert, ToolType.BASE),
    "archival_memory_search": (archival_memory_search, ToolType.BASE),
    "core_memory_append": (core_memory_append, ToolType.MEMORY),
    "core_memory_replace": (core_memory_replace, ToolType.MEMORY),
    "rethink_memory": (rethink_memory, ToolType.MEMORY),
    "memory_insert": (memory_insert, ToolType.MEMORY),
    "memory_replace": (memory_replace, ToolType.MEMORY),
    "memory_rethink": (memory_rethink, ToolType.MEMORY),
    "memory_finish_edits": (memory_finish_edits, ToolType.MEMORY),
    "memory": (memory, ToolType.MEMORY),
}

# What an agent created with include_base_tools gets. The newer memory tools are attached by
# name (``tools=["memory_insert", ...]``), as Letta's agents that use them name them.
DEFAULT_BASE_TOOLS = frozenset(
    {
        "send_message",
        "conversation_search",
        "archival_memory_insert",
        "archival_memory_search",
        "core_memory_append",
        "core_memory_replace",
        "rethink_memory",
    }
)
# What a letta_v1 agent gets instead, as in Letta: it answers in text (no send_message) and edits
# its memory with the newer tools.
LETTA_V1_BASE_TOOLS = frozenset({"conversation_search", "memory_insert", "memory_replace"})


# A sleep-time agent's, as in Letta: it edits the memory it shares with its main agent, then says so.
SLEEPTIME_BASE_TOOLS = frozenset({"memory_insert", "memory_replace", "memory_rethink", "memory_finish_edits"})
# A main agent made with a sleep-time agent leaves its memory to it (Letta's chat tools for it);
# a letta_v1 agent answers in text, without send_message.
SLEEPTIME_CHAT_TOOLS = frozenset({"send_message", "conversation_search", "archival_memory_search"})


def default_base_tools(agent_type: AgentType, *, sleeptime: bool = False) -> frozenset[str]:
    """The base tools an agent of this type gets with ``include_base_tools`` (``sleeptime``: it is
    made with a sleep-time agent, which keeps its memory)."""
    if agent_type is AgentType.SLEEPTIME:
        return SLEEPTIME_BASE_TOOLS
    if sleeptime:
        return SLEEPTIME_CHAT_TOOLS if agent_type.heartbeats else SLEEPTIME_CHAT_TOOLS - {"send_message"}
    return DEFAULT_BASE_TOOLS if agent_type.heartbeats else LETTA_V1_BASE_TOOLS


@functools.cache
def _signature(function: Callable[..., Any]) -> inspect.Signature:
    # Reading a signature costs about as much as the memory edit itself: once per tool.
    return inspect.signature(function)


async def run_base_tool(name: str, context: AgentContext, arguments: dict[str, Any]) -> str:
    """Run base tool ``name``; bad arguments and refused edits raise ``ToolError``."""
    entry = BASE_TOOLS.get(name)
    if entry is None:
        raise ToolError(f"{name!r} is not a base tool")
    function = entry[0]
    try:
        _signature(function).bind(context, **arguments)
    except TypeError as exc:
        raise ToolError(f"bad arguments for {name}: {exc}") from exc
    result = function(context, **arguments)
    if inspect.isawaitable(result):
        result = await result
    return str(result)
