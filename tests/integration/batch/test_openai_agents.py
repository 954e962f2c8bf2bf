"""Agents on an OpenAI model against the strict emulator, which refuses what the real API refuses.

The real API refused every first step of an OpenAI agent: the greeting's tool call, written when
the agent is created, had a 41-character id and OpenAI takes at most 40. These tests step OpenAI
agents in a batch run and synchronously, an agent that moves from Anthropic to OpenAI (replaying
Anthropic's tool-use ids), and an agent stored with an old 41-character greeting id.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import update

from integration.batch.kit import say
from nightshift.config import Settings
from nightshift.emulator import EmulatorAdmin
from nightshift.store import tables
from nightshift.store.db import opened
from support.runs import OPENAI_MODEL, Runs

OLD_GREETING_ID = "call-0192f0c4-1a2b-7c3d-8e4f-a5b6c7d8e9f0"  # what agents created before hold


def greeting_id(context: list[dict[str, Any]]) -> str:
    """The tool-call id of the greeting (the first tool result of a new agent)."""
    call_id: str = next(m for m in context if m["message_type"] == "tool_return_message")["tool_call_id"]
    return call_id


def sent_calls(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(tool call id, id of the tool message right after it)`` for each call of an OpenAI request."""
    messages = body["messages"]
    pairs = []
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            pairs.append((call["id"], messages[index + 1].get("tool_call_id")))
    return pairs


async def test_a_new_agents_greeting_has_a_tool_call_id_both_providers_accept(runs: Runs) -> None:
    agent = await runs.agent("greeter", model=OPENAI_MODEL)
    call_id = greeting_id(await runs.context(agent["id"]))

    assert len(call_id) <= 40 and re.fullmatch(r"[a-zA-Z0-9_-]+", call_id)


async def test_an_openai_agent_steps_in_a_batch_run(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("batched", model=OPENAI_MODEL)
    await admin.script(agent["id"], say("Hello from a batch."))
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 0, "cancelled": 0}
    assert [m["role"] for m in await runs.messages(run["id"])] == ["user", "assistant", "tool"]
    (seen,) = await admin.model_calls(api="openai", custom_id=agent["id"])
    call_id = greeting_id(await runs.context(agent["id"]))
    assert sent_calls(seen["body"]) == [(call_id, call_id)]


async def test_an_openai_agent_steps_synchronously(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("direct", model=OPENAI_MODEL)
    await admin.script("*", say("Hello right away."))
    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hello"})

    assert response.status_code == 200, response.text
    assert response.json()["stop_reason"]["stop_reason"] == "end_turn"
    said = [m["content"] for m in response.json()["messages"] if m["message_type"] == "assistant_message"]
    assert said == ["Hello right away."]


async def test_an_agent_moved_from_anthropic_to_openai_replays_its_calls(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("mover")
    first = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hello"})
    assert first.status_code == 200, first.text
    moved = await runs.client.patch(f"/v1/agents/{agent['id']}", json={"model": OPENAI_MODEL})
    assert moved.status_code == 200, moved.text
    second = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "still there?"})

    assert second.status_code == 200, second.text
    assert second.json()["stop_reason"]["stop_reason"] == "end_turn"
    (seen,) = await admin.model_calls(api="openai")
    calls = sent_calls(seen["body"])
    assert len(calls) == 2 and all(call == answer for call, answer in calls)
    assert calls[1][0].startswith("toolu_")  # Anthropic's id, replayed as it is


async def test_an_agent_stored_with_a_41_character_greeting_id_still_steps(
    runs: Runs, admin: EmulatorAdmin, settings: Settings
) -> None:
    agent = await runs.agent("old-timer", model=OPENAI_MODEL)
    await _store_greeting_id(settings.resolved_database_url, agent["id"], OLD_GREETING_ID)
    assert greeting_id(await runs.context(agent["id"])) == OLD_GREETING_ID

    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hello"})
    assert response.status_code == 200, response.text
    run = await runs.start([{"agent_id": agent["id"], "input": "and in a batch?"}])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed" and done["progress"]["agents"]["finished"] == 1, done

    for seen in await admin.model_calls(api="openai"):
        (greeting, *_) = sent_calls(seen["body"])
        assert greeting[0] == greeting[1] and len(greeting[0]) <= 40


async def _store_greeting_id(database_url: str, agent_id: str, call_id: str) -> None:
    """Rewrite an agent's greeting as an older nightshift stored it (no API writes tool-call ids)."""
    messages = tables.messages
    async with opened(database_url) as engine:
        async with engine.begin() as conn:
            mine = messages.c.agent_id == agent_id
            calls = (await conn.execute(messages.select().where(mine, messages.c.role == "assistant"))).all()
            (greeting,) = calls
            old_calls = [{**c, "id": call_id} for c in greeting.tool_calls]
            await conn.execute(update(messages).where(messages.c.id == greeting.id).values(tool_calls=old_calls))
            await conn.execute(update(messages).where(mine, messages.c.role == "tool").values(tool_call_id=call_id))
