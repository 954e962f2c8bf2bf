"""``store.copy``: many rows written at once read back exactly as written, whichever way they went
(COPY on PostgreSQL from ``COPY_MIN_ROWS`` rows, INSERT otherwise), count as one statement, and
fail as an INSERT would; a statement run for many rows sends what SQLAlchemy would (on SQLite and
PostgreSQL)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Update, bindparam, event, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.agents import LLMConfig
from nightshift.domain.messages import Image, Message, Role, ToolCall
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.ids import new_id
from nightshift.services.agents import AgentSpec, create_agents
from nightshift.store import messages as message_store
from nightshift.store.copy import COPY_MIN_ROWS, execute_rows
from nightshift.store.orgs import ensure_default_org
from nightshift.store.tables import agents, messages

CONFIG = LLMConfig(provider="anthropic", model="claude-3-5-haiku-20241022")


def conversation(agent_id: str, count: int) -> list[Message]:
    """``count`` messages of every kind a step writes: text with awkward characters, JSON tool
    calls, tool results, images, optional fields left empty."""
    start = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    made = []
    for index in range(count):
        common: dict[str, Any] = {
            "id": new_id("message"),
            "organization_id": DEFAULT_ORG_ID,
            "agent_id": agent_id,
            "created_at": start + timedelta(microseconds=index),
        }
        match index % 3:
            case 0:
                made.append(
                    Message(
                        **common,
                        role=Role.USER,
                        text=f"line {index}\ttab, quote ' \" backslash \\ and é ✓",
                        images=(Image(media_type="image/png", data="aGVsbG8="),) if index % 2 else (),
                        otid=f"client-{index}",
                    )
                )
            case 1:
                call = ToolCall(
                    id=f"call-{index}", name="core_memory_append", arguments=f'{{"label": "human", "n": {index}}}'
                )
                made.append(Message(**common, role=Role.ASSISTANT, text="", reasoning="why not", tool_calls=(call,)))
            case _:
                made.append(
                    Message(
                        **common,
                        role=Role.TOOL,
                        text='{"status": "OK", "message": "done"}',
                        tool_call_id=f"call-{index - 1}",
                        name="core_memory_append",
                        is_error=index % 2 == 0,
                    )
                )
    return made


async def agent_id(engine: AsyncEngine) -> str:
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        (agent,) = await create_agents(
            conn, DEFAULT_ORG_ID, [AgentSpec(name="copied", llm_config=CONFIG)], now=datetime.now(UTC)
        )
    return agent.id


@pytest.mark.parametrize("count", [3, COPY_MIN_ROWS, 5 * COPY_MIN_ROWS + 1])
async def test_rows_read_back_as_written_in_one_statement(engine: AsyncEngine, count: int) -> None:
    owner = await agent_id(engine)
    written = conversation(owner, count)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    async with engine.begin() as conn:
        await message_store.get_messages(conn, ["no-such-message"])  # (a read begins the transaction)
        event.listen(engine.sync_engine, "before_cursor_execute", seen)
        try:
            await message_store.insert_messages(conn, written)
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", seen)
    async with engine.connect() as conn:
        read = await message_store.get_messages(conn, [m.id for m in written])
        found = await message_store.search_messages(conn, owner, "awkward backslash", limit=5, offset=0)

    assert [read[m.id] for m in written] == written
    copied = engine.dialect.name == "postgresql" and count >= COPY_MIN_ROWS
    assert statements[0].startswith("COPY messages" if copied else "INSERT INTO messages")
    # SQLite's full-text index takes the new rows in a statement of its own; PostgreSQL's is an index.
    assert [s.split(" (")[0] for s in statements[1:]] == (
        ["INSERT INTO messages_fts"] if engine.dialect.name == "sqlite" else []
    )
    assert found and found[0].role is Role.USER  # the full-text index holds the copied rows too
    async with engine.connect() as conn:  # every user message (each says "line N"), none twice
        hits = await message_store.search_messages(conn, owner, "line", limit=10_000, offset=0)
    assert sorted(m.id for m in hits) == sorted(m.id for m in written if m.role is Role.USER)


async def test_a_violated_constraint_is_an_integrity_error_and_writes_nothing(engine: AsyncEngine) -> None:
    owner = await agent_id(engine)
    written = conversation(owner, COPY_MIN_ROWS)
    repeated = [*written, written[0]]  # the same id twice
    with pytest.raises(IntegrityError):
        async with engine.begin() as conn:
            await message_store.get_messages(conn, ["no-such-message"])
            await message_store.insert_messages(conn, repeated)
    async with engine.connect() as conn:
        assert await message_store.get_messages(conn, [m.id for m in written]) == {}


async def test_rows_written_first_in_a_transaction_roll_back_with_it(engine: AsyncEngine) -> None:
    """Before its first statement a transaction has not begun on the driver's connection: rows
    written then must still be part of it (a copy would not be), and go when it rolls back."""
    owner = await agent_id(engine)
    written = conversation(owner, COPY_MIN_ROWS)
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with engine.begin() as conn:
            await message_store.insert_messages(conn, written)
            raise RuntimeError("changed my mind")
    async with engine.connect() as conn:
        assert await message_store.get_messages(conn, [m.id for m in written]) == {}


def _plain(parameters: Any) -> Any:
    return dict(parameters) if isinstance(parameters, Mapping) else tuple(parameters)


async def test_a_statement_run_for_many_rows_sends_what_sqlalchemy_sends(engine: AsyncEngine) -> None:
    """``execute_rows`` builds the parameters itself on SQLite: the statement and every row's
    parameters must be those SQLAlchemy's own ``executemany`` sends (timestamps and JSON bound as
    the columns bind them, values written into the statement, a parameter used twice), and the
    rows must change the same way."""
    owner = await agent_id(engine)
    written = conversation(owner, 6)
    async with engine.begin() as conn:
        await message_store.insert_messages(conn, written)
    now = datetime(2026, 5, 6, 7, 8, 9, 123, tzinfo=UTC)
    statements: list[tuple[Update, list[dict[str, Any]]]] = [
        (
            update(agents)
            .where(agents.c.id == bindparam("a_id"), agents.c.organization_id == DEFAULT_ORG_ID)
            .values(message_ids=bindparam("ids"), context_tokens=bindparam("tokens"), updated_at=bindparam("now")),
            [{"a_id": owner, "ids": [m.id for m in written], "tokens": 1234, "now": now}],
        ),
        (
            update(messages)
            .where(messages.c.id == bindparam("m_id"), messages.c.text != bindparam("t"))
            .values(text=bindparam("t"), created_at=now),
            [{"m_id": m.id, "t": f"new text {i} é"} for i, m in enumerate(written)],
        ),
    ]
    sent: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        sent.append((statement, [_plain(p) for p in parameters] if many else _plain(parameters)))

    states = []
    for by_us in (False, True):
        event.listen(engine.sync_engine, "before_cursor_execute", seen)
        try:
            async with engine.connect() as conn:
                for statement, rows in statements:
                    await (execute_rows(conn, statement, rows) if by_us else conn.execute(statement, rows))
                window = select(agents.c.message_ids, agents.c.context_tokens)
                texts = select(messages.c.text, messages.c.created_at).order_by(messages.c.id)
                states.append(((await conn.execute(window)).all(), (await conn.execute(texts)).all()))
                await conn.rollback()
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", seen)
    theirs, ours = sent[: len(sent) // 2], sent[len(sent) // 2 :]
    assert ours == theirs
    assert states[0] == states[1]
    assert states[0][0] == [([m.id for m in written], 1234)]
