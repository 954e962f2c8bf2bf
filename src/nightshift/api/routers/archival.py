"""/v1/agents/{id}/archival-memory: an agent's archival passages, as letta-client's ``agents.passages``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import Query

from nightshift.api.deps import Conn, Now, Org
from nightshift.api.passage_schemas import (
    PassageCreate,
    PassagePublic,
    PassageSearchResponse,
    PassageSearchResult,
    in_utc,
)
from nightshift.api.routers import secured
from nightshift.domain.limits import MAX_TAGS
from nightshift.domain.pagination import MAX_PAGE, Page
from nightshift.domain.passages import PassageFilter
from nightshift.errors import InvalidInput
from nightshift.services import passages as service
from nightshift.tools.base import SEARCH_PAGE_SIZE

router = secured("archival memory")

# A search is a few words: 10,000 characters is far more than one needs, and keeps a query from being a document.
MAX_QUERY_CHARS = 10_000


@router.get("/v1/agents/{agent_id}/archival-memory")
async def list_passages(
    agent_id: str,
    conn: Conn,
    org: Org,
    after: Annotated[str | None, Query(description="A passage id: the passages listed after it")] = None,
    before: Annotated[str | None, Query(description="A passage id: the passages listed before it")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size")] = 100,
    ascending: Annotated[bool, Query(description="Oldest first (true, the default) or newest first")] = True,
    order: Annotated[Literal["asc", "desc"] | None, Query(description="asc or desc, instead of ascending")] = None,
    search: Annotated[
        str | None, Query(max_length=MAX_QUERY_CHARS, description="Keep the passages holding any of these words")
    ] = None,
) -> list[PassagePublic]:
    """A page of the agent's passages by creation time, oldest first (``ascending=false``: newest first).

    ``after`` / ``before`` are passage ids, in the listing's order; an id that is not one of the
    agent's passages gives an empty page. ``search`` is the full-text search of
    ``archival_memory_search`` (any of the words, in any form the database's stemming knows),
    and keeps the listing's order.
    """
    ordering = order or ("asc" if ascending else "desc")
    page = Page(after=after, before=before, limit=limit, order=ordering)
    found = await service.list_passages(conn, org, agent_id, page, search=search)
    return [PassagePublic.of(p) for p in found]


@router.post("/v1/agents/{agent_id}/archival-memory")
async def create_passage(agent_id: str, body: PassageCreate, conn: Conn, org: Org, now: Now) -> list[PassagePublic]:
    """Save a passage to the agent's archival memory; Letta's answer, a list of the passages made (one).

    Empty text (or only whitespace) is a 422; ``created_at`` backdates the passage.
    """
    passage = await service.insert_passage(
        conn, org, agent_id, body.text, now=now, tags=body.tags or (), created_at=body.created_at
    )
    return [PassagePublic.of(passage)]


@router.get("/v1/agents/{agent_id}/archival-memory/search")
async def search_passages(
    agent_id: str,
    conn: Conn,
    org: Org,
    query: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, description="The words to look for")],
    top_k: Annotated[
        int | None, Query(ge=1, le=MAX_PAGE, description=f"How many passages at most (default {SEARCH_PAGE_SIZE})")
    ] = None,
    tags: Annotated[list[str] | None, Query(max_length=MAX_TAGS, description="Only passages with these tags")] = None,
    tag_match_mode: Annotated[
        Literal["any", "all"], Query(description="any: a passage with one of the tags; all: with every one")
    ] = "any",
    start_datetime: Annotated[
        datetime | None, Query(description="Only passages created then or later (no zone: UTC)")
    ] = None,
    end_datetime: Annotated[
        datetime | None, Query(description="Only passages created then or earlier (no zone: UTC)")
    ] = None,
) -> PassageSearchResponse:
    """The agent's passages best matching ``query``, best first: the search ``archival_memory_search`` makes.

    A full-text search over the passages' words (nightshift keeps no embeddings), filtered by
    tags and by creation time. A query without any word finds nothing.
    """
    only = PassageFilter(
        tags=tuple(tags or ()),
        match_all_tags=tag_match_mode == "all",
        start=_utc(start_datetime, "start_datetime"),
        end=_utc(end_datetime, "end_datetime"),
    )
    found = await service.search_passages(conn, org, agent_id, query, limit=top_k or SEARCH_PAGE_SIZE, only=only)
    return PassageSearchResponse(results=[PassageSearchResult.of(p) for p in found], count=len(found))


@router.delete("/v1/agents/{agent_id}/archival-memory/{memory_id}")
async def delete_passage(agent_id: str, memory_id: str, conn: Conn, org: Org) -> dict[str, str]:
    """Delete one passage of the agent's archival memory (404 if the agent has no passage of that id)."""
    await service.delete_passage(conn, org, agent_id, memory_id)
    return {"message": f"Memory id={memory_id} successfully deleted"}


def _utc(moment: datetime | None, name: str) -> datetime | None:
    if moment is None:
        return None
    try:
        return in_utc(moment)
    except ValueError as error:
        raise InvalidInput(f"query parameter {name!r}: {error}", field=f"query.{name}") from None
