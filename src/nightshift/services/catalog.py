"""What an organization may choose from: its agents' tags, and the models and embeddings nightshift knows."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Final

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.errors import InvalidInput
from nightshift.pricing import KnownModel, PriceTable, known_embedding_models, known_models
from nightshift.providers.registry import parse_model
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


@dataclass(frozen=True, slots=True)
class ModelNames:
    """The models an agent may name, checked when it is created, changed or imported rather than
    at its first step (where a misspelt name would fail every agent of a run, hours later).

    A model is known when the price data lists it, or prices it (its names match newer models of
    a family too: ``claude-3-5-haiku-latest``), or ``NIGHTSHIFT_PRICES`` gives its prices, or
    ``NIGHTSHIFT_EXTRA_MODELS`` names it (exactly, or ``provider/prefix*``): a real model newer
    than the price data, whose cost is then unknown.
    """

    prices: PriceTable
    extra: frozenset[str] = frozenset()

    @classmethod
    def of(cls, prices: PriceTable, extra: Iterable[str]) -> ModelNames:
        """The models known to ``prices``, and the ``extra`` ones (see ``check_extra_models``)."""
        return cls(prices=prices, extra=frozenset(check_extra_models(extra)))

    def check(self, provider: str, name: str) -> None:
        """Raises InvalidInput (field ``model``) naming the close known names when ``provider/name``
        is not a known model."""
        handle = f"{provider}/{name}"
        if self.knows(handle):
            return
        # Compared within the provider: the shared "provider/" would make any two names look alike.
        extra = sorted(e for e in self.extra if not e.endswith("*"))
        names = [h.partition("/")[2] for h in [*_handles(), *extra] if h.startswith(f"{provider}/")]
        close = [f"{provider}/{n}" for n in difflib.get_close_matches(name, names, n=4, cutoff=0.6)]
        hint = f"; did you mean {' or '.join(close)}?" if close else f"; see {provider}'s known models: GET /v1/models/"
        raise InvalidInput(
            f"unknown model {handle!r}{hint} (a model newer than nightshift's price data can be allowed with"
            " NIGHTSHIFT_EXTRA_MODELS)",
            field="model",
        )

    def knows(self, handle: str) -> bool:
        if handle in self.extra or any(e.endswith("*") and handle.startswith(e[:-1]) for e in self.extra):
            return True
        return handle in _known_handles() or self.prices.price(handle, batch=False) is not None


def check_extra_models(extra: Iterable[str]) -> list[str]:
    """``NIGHTSHIFT_EXTRA_MODELS``, each checked.

    Raises:
        InvalidInput: An entry is not ``provider/model-name`` of a known provider.
    """
    checked = list(extra)
    for handle in checked:
        try:
            parse_model(handle)
        except InvalidInput as exc:
            raise InvalidInput(f"NIGHTSHIFT_EXTRA_MODELS: {exc.message}", field="extra_models") from None
    return checked


@cache
def _handles() -> list[str]:
    return [f"{m.provider}/{m.name}" for m in known_models()]


@cache
def _known_handles() -> frozenset[str]:
    return frozenset(_handles())


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
