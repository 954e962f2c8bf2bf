"""Recall and archival search for the base tools, backed by the store."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.messages import Message
from nightshift.domain.passages import Passage
from nightshift.store import messages as message_store
from nightshift.store import passages as passage_store


class StoreSearch:
    """``MemorySearch`` over one open connection (the step's transaction)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def messages(self, agent_id: str, query: str, *, limit: int, offset: int) -> list[Message]:
        return await message_store.search_messages(self._conn, agent_id, query, limit=limit, offset=offset)

    async def passages(self, agent_id: str, query: str, *, limit: int, offset: int) -> list[Passage]:
        return await passage_store.search_passages(self._conn, agent_id, query, limit=limit, offset=offset)
