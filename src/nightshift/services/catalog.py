"""What an organization may choose from: its agents' tags, and the models and embeddings nightshift knows."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.pricing import KnownModel, known_embedding_models, known_models
from nightshift.store import agents as agent_store
from nightshift.store.pagination import MAX_PAGE

# The vector sizes of the embedding models the price data names (their providers publish them).
# nightshift stores an agent's embedding name only: archival search is full-text.
EMBEDDING_DIMENSIONS: Final = {
    "text-embedding-3-large": 3072,
    "text-embedding-3-small": 1536,
    "text-embedding-ada-002": 1536,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddingModel:
    """An embedding model an agent may name."""

    provider: str
    name: str
    dimensions: int


async def list_tags(
    conn: AsyncConnection,
    org_id: str,
    *,
    after: str | None = None,
    before: str | None = None,
    limit: int | None = 50,
    descending: bool = False,
    containing: str | None = None,
) -> list[str]:
    """A page of the distinct tags of the organization's agents, alphabetically (one statement)."""
    size = MAX_PAGE if limit is None else max(1, min(limit, MAX_PAGE))
    return await agent_store.list_tags(
        conn, org_id, after=after, before=before, limit=size, descending=descending, containing=containing
    )


def list_models(provider: str | None = None) -> list[KnownModel]:
    """The chat models of the registered providers (of ``provider`` only, if given)."""
    return [m for m in known_models() if provider is None or m.provider == provider]


@cache
def _windows() -> dict[tuple[str, str], int]:
    return {(m.provider, m.name): m.context_window for m in known_models()}


def model_context_window(provider: str, name: str) -> int | None:
    """The context window of a model the price data knows, in tokens (None: an unknown model)."""
    return _windows().get((provider, name))


def list_embedding_models() -> list[EmbeddingModel]:
    """The embedding models an agent may name, with their vector sizes."""
    return [
        EmbeddingModel(provider=provider, name=name, dimensions=EMBEDDING_DIMENSIONS[name])
        for provider, name in known_embedding_models()
        if name in EMBEDDING_DIMENSIONS
    ]
