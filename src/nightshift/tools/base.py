"""Base tools: sending messages, editing core memory, and searching recall and archival memory.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from nightshift.domain.blocks import Block
from nightshift.domain.messages import Message, said_text
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
        self.blocks[label] = replace(block, value=value, updated_at=datetime.now(UTC))
        self.changed_labels.add(label)


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
    results = [{"timestamp": m.created_at.isoformat(), "role": m.role.value, "text": said_text(m)} for m in found]
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
}


@functools.cache
def _signature(function: Callable[..., Any]) -> inspect.Signature:
    # Reading a signature costs about 10 us, about as much as the memory edit itself: once per tool.
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
