"""Passages: entries of an agent's archival memory."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nightshift.domain.fast_init import fast_init


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Passage:
    """One entry of an agent's archival memory, found again by full-text search."""

    id: str
    organization_id: str
    agent_id: str
    text: str
    tags: tuple[str, ...] = ()
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class PassageFilter:
    """Which passages a search may return: by tags and by creation time (both ends included)."""

    tags: tuple[str, ...] = ()
    match_all_tags: bool = False  # every tag of ``tags`` rather than any of them
    start: datetime | None = None
    end: datetime | None = None
