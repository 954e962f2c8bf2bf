"""The system message: the agent's instructions with its core memory compiled in."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from nightshift.domain.blocks import Block

MEMORY_START = "<memory_blocks>"


def compile_blocks(blocks: Sequence[Block]) -> str:
    """Core memory as the model sees it: each block with its label, size and limit."""
    parts = [MEMORY_START, "Your core memory, always visible to you. Edit it with the memory tools."]
    for block in blocks:
        parts.append(f"<{block.label}>")
        if block.description:
            parts.append(f"<description>{block.description}</description>")
        parts.append(
            f"<metadata>chars_current={len(block.value)} chars_limit={block.limit}"
            f"{' read_only=true' if block.read_only else ''}</metadata>"
        )
        parts.append(f"<value>\n{block.value}\n</value>")
        parts.append(f"</{block.label}>")
    parts.append("</memory_blocks>")
    return "\n".join(parts)


def compile_metadata(*, now: datetime, recall_count: int, archival_count: int) -> str:
    """The memory-metadata section: the time and what lies outside the context window."""
    return "\n".join(
        [
            "<memory_metadata>",
            f"- The current time is {now.strftime('%Y-%m-%d %H:%M:%S %Z').strip()}.",
            f"- {recall_count} earlier messages are stored in recall memory (search them with conversation_search).",
            f"- {archival_count} passages are stored in archival memory (search them with archival_memory_search).",
            "</memory_metadata>",
        ]
    )


def compile_system_message(
    system: str,
    blocks: Sequence[Block],
    *,
    now: datetime,
    recall_count: int,
    archival_count: int,
) -> str:
    """The full text of the agent's system message."""
    return "\n\n".join(
        [
            system,
            compile_blocks(blocks),
            compile_metadata(now=now, recall_count=recall_count, archival_count=archival_count),
        ]
    )


def memory_changed(current_system_message: str, system: str, blocks: Sequence[Block]) -> bool:
    """Whether ``current_system_message`` no longer matches the agent's prompt and blocks.

    The metadata (time, counts) is ignored so that an unchanged memory keeps the same system
    message, and with it the provider's prompt cache.
    """
    return not current_system_message.startswith(f"{system}\n\n{compile_blocks(blocks)}")
