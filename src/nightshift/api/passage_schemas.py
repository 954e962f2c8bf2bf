"""Request and response bodies of an agent's archival memory (``/v1/agents/{id}/archival-memory``),
in Letta's field names."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator

from nightshift.api.input import Body, Tags, Text
from nightshift.domain.passages import Passage


def in_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; one without a zone is taken as UTC already (nightshift's agents live in UTC).

    Raises:
        ValueError: the moment, moved to UTC, falls outside the years 1 to 9999.
    """
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{moment.isoformat()} is outside the years 1 to 9999 once moved to UTC") from None


class PassageCreate(Body):
    """Letta's CreateArchivalMemory: one passage to save."""

    text: Annotated[Text, Field(min_length=1, description="Text to write to archival memory")]
    tags: Tags | None = Field(default=None, description="Tags to attach to the passage, to filter searches by")
    created_at: datetime | None = Field(
        default=None, description="When the memory is from (default now); a time without a zone is UTC"
    )

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else in_utc(value)


class PassagePublic(BaseModel):
    """Letta's Passage: an entry of an agent's archival memory.

    nightshift keeps no embeddings and no archives (an agent's passages are its own): ``embedding``,
    ``embedding_config`` and ``archive_id`` are null, and ``agent_id`` names the agent.
    """

    id: str
    text: str
    agent_id: str
    archive_id: str | None = None
    tags: list[str]
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    embedding: list[float] | None = None
    embedding_config: dict[str, Any] | None = None
    is_deleted: bool = False
    created_by_id: str | None = None
    last_updated_by_id: str | None = None
    file_id: str | None = None
    file_name: str | None = None
    source_id: str | None = None

    @classmethod
    def of(cls, passage: Passage) -> PassagePublic:
        return cls(
            id=passage.id,
            text=passage.text,
            agent_id=passage.agent_id,
            tags=list(passage.tags),
            created_at=passage.created_at,
            updated_at=passage.created_at,
        )


class PassageSearchResult(BaseModel):
    """Letta's ArchivalMemorySearchResult: one passage found, as the search tool shows it."""

    id: str
    content: str
    timestamp: str = Field(description="When the passage was created, ISO 8601 in UTC")
    tags: list[str]

    @classmethod
    def of(cls, passage: Passage) -> PassageSearchResult:
        return cls(
            id=passage.id, content=passage.text, timestamp=passage.created_at.isoformat(), tags=list(passage.tags)
        )


class PassageSearchResponse(BaseModel):
    """Letta's ArchivalMemorySearchResponse: the passages found, best first."""

    results: list[PassageSearchResult]
    count: int = Field(description="How many results there are")
