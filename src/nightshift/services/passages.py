"""An agent's archival memory through the API: passages inserted, listed, searched and deleted.

These are the passages the base tools write and search (``archival_memory_insert``,
``archival_memory_search``): one table, one full-text search, whoever writes or reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.passages import Passage, PassageFilter
from nightshift.errors import InvalidInput, NotFound
from nightshift.ids import new_id
from nightshift.store import agents as agent_store
from nightshift.store import passages as passage_store
from nightshift.store.pagination import Page


async def _check_agent(conn: AsyncConnection, org_id: str, agent_id: str) -> None:
    if not await agent_store.agent_exists(conn, org_id, agent_id):
        raise NotFound(f"agent {agent_id} not found")


async def insert_passage(
    conn: AsyncConnection,
    org_id: str,
    agent_id: str,
    text: str,
    *,
    now: datetime,
    tags: Sequence[str] = (),
    created_at: datetime | None = None,
) -> Passage:
    """Save one passage to the agent's archival memory, as ``archival_memory_insert`` does.

    ``created_at`` (aware) backdates it; by default it is ``now``. Repeated tags are kept once.

    Raises:
        NotFound: no such agent in the organization.
        InvalidInput: the text has nothing but whitespace.
    """
    if not text.strip():
        raise InvalidInput("text is empty: a passage needs words to be found again", field="text")
    await _check_agent(conn, org_id, agent_id)
    passage = Passage(
        id=new_id("passage"),
        organization_id=org_id,
        agent_id=agent_id,
        text=text,
        tags=tuple(dict.fromkeys(tags)),
        created_at=created_at or now,
    )
    await passage_store.insert_passages(conn, [passage])
    return passage


async def list_passages(
    conn: AsyncConnection, org_id: str, agent_id: str, page: Page, *, search: str | None = None
) -> list[Passage]:
    """A page of the agent's passages, oldest first (``page.order``), kept to those matching ``search``.

    Raises:
        NotFound: no such agent in the organization.
    """
    await _check_agent(conn, org_id, agent_id)
    return await passage_store.list_passages(conn, agent_id, page, search=search)


async def search_passages(
    conn: AsyncConnection, org_id: str, agent_id: str, query: str, *, limit: int, only: PassageFilter
) -> list[Passage]:
    """The agent's ``limit`` best passages for ``query``, the search ``archival_memory_search`` makes.

    Raises:
        NotFound: no such agent in the organization.
        InvalidInput: the time range ends before it starts.
    """
    if only.start is not None and only.end is not None and only.start > only.end:
        raise InvalidInput("start_datetime is after end_datetime: no passage can match", field="start_datetime")
    await _check_agent(conn, org_id, agent_id)
    return await passage_store.search_passages(conn, agent_id, query, limit=limit, only=only)


async def delete_passage(conn: AsyncConnection, org_id: str, agent_id: str, passage_id: str) -> None:
    """Delete one passage of the agent's archival memory.

    Raises:
        NotFound: no such agent in the organization, or no passage of that id in its memory.
    """
    await _check_agent(conn, org_id, agent_id)
    if not await passage_store.delete_passage(conn, agent_id, passage_id):
        raise NotFound(f"passage {passage_id} not found in agent {agent_id}'s archival memory")
