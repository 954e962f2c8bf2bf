"""Messages of agents, their full-text search, and the counts shown in the memory metadata."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.messages import Image, Message, Role, ToolCall, search_text
from nightshift.store.bulk import count_per_agent, in_ids
from nightshift.store.copy import insert_rows
from nightshift.store.pagination import Page, paginate
from nightshift.store.search import ranked_select
from nightshift.store.tables import messages


def to_message(row: Sequence[Any]) -> Message:
    """Map a row of ``select(messages)`` (the table's columns, in its order) to the domain type.

    The row is unpacked by position: reading sixteen columns of a SQLAlchemy row by name costs
    fifteen times as much, and a step reads its agents' whole windows (a mismatch in the number of
    columns fails here, loudly).
    """
    (
        id_,
        organization_id,
        agent_id,
        role,
        text,
        _search_text,
        reasoning,
        tool_calls,
        tool_call_id,
        name,
        is_error,
        batch_item_id,
        extra,
        created_at,
        run_id,
        step_id,
    ) = row
    images = extra.get(_IMAGES)
    return Message(
        id=id_,
        organization_id=organization_id,
        agent_id=agent_id,
        role=Role(role),
        text=text,
        reasoning=reasoning,
        tool_calls=tuple(ToolCall(**c) for c in tool_calls),
        tool_call_id=tool_call_id,
        name=name,
        is_error=is_error,
        batch_item_id=batch_item_id,
        run_id=run_id,
        step_id=step_id,
        extra={k: v for k, v in extra.items() if k != _IMAGES} if images is not None else extra,
        created_at=created_at,
        images=tuple(Image(**image) for image in images) if images else (),
    )


_IMAGES = "images"


def _image(image: Image) -> dict[str, str]:
    return {k: v for k, v in (("media_type", image.media_type), ("data", image.data), ("url", image.url)) if v}


def _values(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "organization_id": message.organization_id,
        "agent_id": message.agent_id,
        "role": message.role.value,
        "text": message.text,
        "search_text": search_text(message),
        "reasoning": message.reasoning,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        "is_error": message.is_error,
        "batch_item_id": message.batch_item_id,
        "run_id": message.run_id,
        "step_id": message.step_id,
        # Images ride in the extra JSON (under a key of their own), so no column is needed for them.
        "extra": message.extra | {_IMAGES: [_image(i) for i in message.images]} if message.images else message.extra,
        "created_at": message.created_at,
    }


async def insert_messages(conn: AsyncConnection, new: Sequence[Message]) -> None:
    """Insert messages of any number of agents in one statement."""
    await insert_rows(conn, messages, [_values(m) for m in new])


async def get_messages(conn: AsyncConnection, ids: Iterable[str]) -> dict[str, Message]:
    """Messages by id (callers check ownership through the agent they came from)."""
    wanted = list(ids)
    if not wanted:
        return {}
    rows = await conn.execute(select(messages).where(in_ids(conn, messages.c.id, wanted)))
    return {row[0]: to_message(row) for row in rows}  # (the id)


async def message_texts(conn: AsyncConnection, ids: Iterable[str]) -> dict[str, str]:
    """The text of each message by id, reading nothing else of them (callers check ownership)."""
    wanted = list(ids)
    if not wanted:
        return {}
    rows = await conn.execute(select(messages.c.id, messages.c.text).where(in_ids(conn, messages.c.id, wanted)))
    return {str(message_id): str(text) for message_id, text in rows}


async def list_agent_messages(conn: AsyncConnection, agent_id: str, page: Page) -> list[Message]:
    """A page of an agent's messages, in one statement.

    ``after`` / ``before`` are message ids in the page's order, as Letta documents them and its
    clients page: with ``order=desc``, ``after`` gives the older messages.
    """
    query = select(messages).where(messages.c.agent_id == agent_id)
    return [to_message(r) for r in await conn.execute(paginate(query, messages.c.id, page))]


async def delete_agent_messages(conn: AsyncConnection, agent_id: str, *, keep: Sequence[str]) -> None:
    """Delete the agent's stored messages but those in ``keep``, in one statement."""
    statement = delete(messages).where(messages.c.agent_id == agent_id)
    if keep:
        statement = statement.where(messages.c.id.not_in(list(keep)))
    await conn.execute(statement)


async def count_messages(conn: AsyncConnection, agent_ids: Iterable[str]) -> dict[str, int]:
    """Number of stored messages per agent, in one query."""
    return await count_per_agent(conn, messages, agent_ids)


async def search_messages(
    conn: AsyncConnection, agent_id: str, query: str, *, limit: int, offset: int
) -> list[Message]:
    """The agent's messages matching ``query``, best first: what was said and what tools returned
    (see ``domain.messages.search_text``)."""
    ranked = ranked_select(conn.dialect.name, messages, messages.c.search_text, query)
    if ranked is None:
        return []
    statement = (
        ranked.where(
            messages.c.agent_id == agent_id,
            messages.c.role.in_([Role.USER.value, Role.ASSISTANT.value, Role.TOOL.value]),
        )
        .limit(limit)
        .offset(offset)
    )
    return [to_message(r) for r in await conn.execute(statement)]


async def update_system_texts(conn: AsyncConnection, texts: Sequence[tuple[str, str]]) -> None:
    """Rewrite system messages' text in one statement (when agents' prompts or memory change)."""
    if not texts:
        return
    await conn.execute(
        update(messages).where(messages.c.id == bindparam("m_id")).values(text=bindparam("t")),
        [{"m_id": message_id, "t": text} for message_id, text in texts],
    )


async def list_run_messages(conn: AsyncConnection, run_id: str, page: Page) -> list[Message]:
    """A page of the messages an agent run wrote, in creation order (or reversed)."""
    query = select(messages).where(messages.c.run_id == run_id)
    return [to_message(r) for r in await conn.execute(paginate(query, messages.c.id, page))]
