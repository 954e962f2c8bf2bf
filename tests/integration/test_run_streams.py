"""A background run's stored stream, through the in-process API, on SQLite and PostgreSQL.

Its chunks are written in batches (a long answer streamed in hundreds of pieces costs a few
statements, not one per piece) and read back whole, in order, from any point.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import event, func, select

from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from nightshift.services.run_streams import FLUSH_CHUNKS
from nightshift.store.tables import agent_run_chunks
from support.runs import Runs

CHUNK_ROWS = re.compile(r"\s*(?:INSERT INTO|COPY) agent_run_chunks\b", re.I)
LONG_ANSWER = " ".join(f"word{i}" for i in range(600))


def events_of(body: str) -> list[dict[str, Any] | str]:
    """The data of each server-sent event: its JSON object, or ``[DONE]``."""
    found: list[dict[str, Any] | str] = []
    for event_text in body.split("\n\n"):
        for line in event_text.splitlines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                found.append(data if data == "[DONE]" else json.loads(data))
    return found


async def test_a_long_answer_is_stored_in_batches(
    app: FastAPI, client: httpx.AsyncClient, admin: EmulatorAdmin
) -> None:
    agent = await Runs(client).agent("talker")
    call = ScriptedToolCall(name="send_message", arguments={"message": LONG_ANSWER})
    await admin.script("*", ScriptedReply(tool_call=call))
    engine = app.state.nightshift.engine
    writes: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if CHUNK_ROWS.match(statement):
            writes.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        body = {"input": "Talk to me", "background": True, "stream_tokens": True, "include_pings": False}
        answer = await client.post(f"/v1/agents/{agent['id']}/messages/stream", json=body, timeout=60)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)

    assert answer.status_code == 200, answer.text
    events = events_of(answer.text)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    said = "".join(c["content"] for c in chunks if c["message_type"] == "assistant_message")
    assert said == LONG_ANSWER
    pieces = sum(c["message_type"] == "assistant_message" for c in chunks)
    assert pieces > 2 * FLUSH_CHUNKS, "the answer came in many pieces"
    # Every piece stored, in batches: a write per step written, per FLUSH_CHUNKS pieces (or a
    # pause), and the end; never one per piece.
    async with engine.connect() as conn:
        stored = await conn.scalar(select(func.count()).where(agent_run_chunks.c.run_id == chunks[0]["run_id"]))
    assert stored == len(events)
    assert len(writes) < pieces / 4, f"{len(writes)} writes for {pieces} pieces"

    # Read again from the middle, the same chunks follow.
    run_id, middle = chunks[0]["run_id"], len(chunks) // 2
    again = await client.post(f"/v1/runs/{run_id}/stream", json={"starting_after": middle, "include_pings": False})
    assert events_of(again.text) == events[middle:]


async def test_a_refused_background_send_is_a_4xx(client: httpx.AsyncClient, admin: EmulatorAdmin) -> None:
    agent = await Runs(client).agent("busy")
    body = {"input": "  ", "background": True, "streaming": True}
    empty = await client.post(f"/v1/agents/{agent['id']}/messages", json=body)
    assert empty.status_code == 422 and empty.json()["field"] == "messages"
    missing = await client.post("/v1/agents/agent-nope/messages/stream", json={"input": "hi", "background": True})
    assert missing.status_code == 404
