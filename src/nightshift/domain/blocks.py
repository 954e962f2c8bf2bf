"""Blocks: labelled pieces of core memory, compiled into an agent's system message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nightshift.domain.fast_init import fast_init
from nightshift.domain.limits import DEFAULT_BLOCK_LIMIT
from nightshift.errors import InvalidInput


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """A block of core memory. Several agents may share one block (by id)."""

    id: str
    organization_id: str
    label: str
    value: str
    limit: int = DEFAULT_BLOCK_LIMIT
    description: str | None = None
    read_only: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime
    updated_at: datetime


def check_block(label: str, value: str, limit: int) -> None:
    """Raise ``InvalidInput`` for an empty label, a limit below 1, or a value over the limit."""
    if not label.strip():
        raise InvalidInput("a block's label must not be empty", field="label")
    if limit < 1:
        raise InvalidInput(f"block {label!r}: limit must be at least 1", field="limit")
    if len(value) > limit:
        raise InvalidInput(f"block {label!r} holds {len(value)} characters, over its limit of {limit}", field="value")


def check_unique_labels(blocks: Sequence[Block]) -> None:
    """Raise ``InvalidInput`` when two of an agent's blocks share a label."""
    labels = [b.label for b in blocks]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise InvalidInput(
            f"an agent has one block per label; repeated: {', '.join(duplicates)}", field="memory_blocks"
        )
