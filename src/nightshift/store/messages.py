"""Messages of agents, their full-text search, and the counts shown in the memory metadata."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from sqlalchemy import ColumnElement, bindparam, delete, func, literal, select, update
from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.approvals import pending_request
from nightshift.domain.messages import Image, Message, MessageKind, Role, ToolCall, search_text
from nightshift.store.bulk import bound_ids, count_per_agent, in_ids
from nightshift.store.copy import execute_rows, insert_rows
from nightshift.store.pagination import Page, paginate
from nightshift.store.search import ranked_select
from nightshift.store.tables import agents, messages

# Every column but ``search_text``: a copy of the text for the index, which no reader needs (and
# which would double the memory of a step's windows).
MESSAGE_COLUMNS = tuple(c for c in messages.c if c.key != "search_text")
# SQLite's full-text index of the messages just inserted (``insert_messages``), as the triggers of
# migration 0001 keep it for deletions and edits: rows with no text to search are left out.
_INDEX_NEW = sql_text(
    "INSERT INTO messages_fts (rowid, search_text) SELECT rowid, search_text FROM messages "
    "WHERE id IN (SELECT value FROM json_each(:ids)) AND search_text != '' ORDER BY rowid"
)
# A step reads hundreds of thousands of messages: a lookup here costs a tenth of calling the enum.
_ROLES = {role.value: role for role in Role}


def to_message(row: Sequence[Any]) -> Message:
    """Map a row of ``select(*MESSAGE_COLUMNS)`` (in the table's order) to the domain type.

    The row is unpacked by position: reading fifteen columns of a SQLAlchemy row by name costs
    much more, and a step reads its agents' whole windows (a mismatch in the number of
    columns fails here, loudly).
    """
    (
        id_,
        organization_id,
        agent_id,
        role,
        text,
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
    kind, otid, stdout, stderr, images = _extras(extra) if extra else _NO_EXTRAS
    return Message(
        id=id_,
        organization_id=organization_id,
        agent_id=agent_id,
        role=_ROLES[role],
        text=text,
        reasoning=reasoning,
        tool_calls=tuple(map(ToolCall.from_json, tool_calls)) if tool_calls else (),
        tool_call_id=tool_call_id,
        name=name,
        is_error=is_error,
        batch_item_id=batch_item_id,
        run_id=run_id,
        step_id=step_id,
        created_at=created_at,
        kind=kind,
        otid=otid,
        stdout=stdout,
        stderr=stderr,
        images=images,
    )


# The keys of the ``extra`` JSON column, which holds what only some messages have (an empty
# object for most): the kind of an event, the sender's id, what a tool printed, a user's images.
_EVENT, _OTID, _STDOUT, _STDERR, _IMAGES = "event", "otid", "stdout", "stderr", "images"


_Extras: TypeAlias = tuple[MessageKind, str | None, tuple[str, ...], tuple[str, ...], tuple[Image, ...]]
_NO_EXTRAS: _Extras = (MessageKind.PLAIN, None, (), (), ())


def _extras(extra: dict[str, Any]) -> _Extras:
    """The fields a row's ``extra`` holds (rows written before the fields were typed hold the
    same keys; any other key is not read)."""
    event, printed, errors, images = extra.get(_EVENT), extra.get(_STDOUT), extra.get(_STDERR), extra.get(_IMAGES)
    return (
        MessageKind(event) if event else MessageKind.PLAIN,
        extra.get(_OTID),
        tuple(printed) if printed else (),
        tuple(errors) if errors else (),
        tuple(Image(**image) for image in images) if images else (),
    )


def _extra(message: Message) -> dict[str, Any]:
    """The ``extra`` JSON of a message: only the keys it has a value for."""
    extra: dict[str, Any] = {}
    if message.kind is not MessageKind.PLAIN:
        extra[_EVENT] = message.kind.value
    if message.otid is not None:
        extra[_OTID] = message.otid
    if message.stdout:
        extra[_STDOUT] = list(message.stdout)
    if message.stderr:
        extra[_STDERR] = list(message.stderr)
    if message.images:
        extra[_IMAGES] = [_image(i) for i in message.images]
    return extra


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
        "tool_calls": [c.to_json() for c in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        "is_error": message.is_error,
        "batch_item_id": message.batch_item_id,
        "run_id": message.run_id,
        "step_id": message.step_id,
        "extra": _extra(message),
        "created_at": message.created_at,
    }


async def insert_messages(conn: AsyncConnection, new: Sequence[Message]) -> None:
    """Insert messages of any number of agents in one statement (and, on SQLite, one more that
    enters them in the full-text index)."""
    await insert_rows(conn, messages, [_values(m) for m in new])
    if new and conn.dialect.name == "sqlite":
        # One statement for the rows, in rowid order (FTS5 appends those fastest), where a trigger
        # per row cost several times as much (migration 0022); deletions and edits keep theirs.
        await conn.execute(_INDEX_NEW, {"ids": bound_ids(conn, (m.id for m in new))})


async def get_messages(conn: AsyncConnection, ids: Iterable[str]) -> dict[str, Message]:
    """Messages by id (callers check ownership through the agent they came from)."""
    wanted = list(ids)
    if not wanted:
        return {}
    rows = await conn.execute(select(*MESSAGE_COLUMNS).where(in_ids(conn, messages.c.id, wanted)))
    return {row[0]: to_message(row) for row in rows}  # (the id)


async def awaiting_approval(conn: AsyncConnection, agent_ids: Sequence[str]) -> dict[str, Message]:
    """The approval request each agent among ``agent_ids`` awaits an answer to (the last message
    of its window, when it is one; see ``domain.approvals.pending_request``), by agent id.

    One statement, which finds each window's last message in the database (the windows may be
    long) and reads it only if it is such a request: most agents await nothing.
    """
    if not agent_ids:
        return {}
    last: ColumnElement[Any]
    if conn.dialect.name == "postgresql":
        last = agents.c.message_ids.op("->>")(literal(-1))
    else:
        last = func.json_extract(agents.c.message_ids, "$[#-1]")
    query = (
        select(*MESSAGE_COLUMNS)
        .select_from(agents.join(messages, messages.c.id == last))
        .where(
            in_ids(conn, agents.c.id, agent_ids),
            messages.c.role == Role.ASSISTANT.value,
            messages.c.extra[_EVENT].as_string() == MessageKind.APPROVAL_REQUEST.value,
        )
    )
    found = [to_message(row) for row in await conn.execute(query)]
    return {m.agent_id: m for m in found if pending_request(m) is not None}


async def message_texts(conn: AsyncConnection, ids: Iterable[str]) -> dict[str, str]:
    """The text of each message by id, reading nothing else of them (callers check ownership)."""
    wanted = list(ids)
    if not wanted:
        return {}
    rows = await conn.execute(select(messages.c.id, messages.c.text).where(in_ids(conn, messages.c.id, wanted)))
    return {str(message_id): str(text) for message_id, text in rows}


async def messages_after(conn: AsyncConnection, after: Mapping[str, str | None]) -> dict[str, list[Message]]:
    """Each agent's messages after the message named (all of them for None), in order: one statement
    (every agent's from the oldest of the starts; message ids are ordered by time)."""
    if not after:
        return {}
    query = select(*MESSAGE_COLUMNS).where(in_ids(conn, messages.c.agent_id, list(after))).order_by(messages.c.id)
    starts = [start for start in after.values() if start is not None]
    if len(starts) == len(after):
        query = query.where(messages.c.id > min(starts))
    found: dict[str, list[Message]] = {agent_id: [] for agent_id in after}
    for row in await conn.execute(query):
        start = after[row[2]]  # (the agent id)
        if start is None or row[0] > start:
            found[row[2]].append(to_message(row))
    return found


async def list_agent_messages(conn: AsyncConnection, agent_id: str, page: Page) -> list[Message]:
    """A page of an agent's messages, in one statement.

    ``after`` / ``before`` are message ids in the page's order, as Letta documents them and its
    clients page: with ``order=desc``, ``after`` gives the older messages.
    """
    query = select(*MESSAGE_COLUMNS).where(messages.c.agent_id == agent_id)
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
    ranked = ranked_select(conn.dialect.name, messages, messages.c.search_text, query, read=MESSAGE_COLUMNS)
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
    await execute_rows(
        conn,
        update(messages).where(messages.c.id == bindparam("m_id")).values(text=bindparam("t")),
        [{"m_id": message_id, "t": text} for message_id, text in texts],
    )


async def list_run_messages(conn: AsyncConnection, run_id: str, page: Page) -> list[Message]:
    """A page of the messages an agent run wrote, in creation order (or reversed)."""
    query = select(*MESSAGE_COLUMNS).where(messages.c.run_id == run_id)
    return [to_message(r) for r in await conn.execute(paginate(query, messages.c.id, page))]
