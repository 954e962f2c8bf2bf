"""PATCH /v1/agents/{id}/reset-messages while the agent is stepping, and bad bodies of the Letta extras."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from nightshift.config import Settings
from support.api import MEMGPT
from support.databases import sqlite_only
from support.runs import ANTHROPIC_MODEL as MODEL
from support.runs import Runs


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    # No poller: a run's first step stays open until the test says otherwise.
    return Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, poller=False)


async def test_reset_is_refused_while_the_agent_is_in_an_open_step(
    app: FastAPI, client: httpx.AsyncClient, emulator: str
) -> None:
    runs = Runs(client, worker=app.state.nightshift.worker)
    agent = await runs.agent("busy")
    await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    before = (await client.get(f"/v1/agents/{agent['id']}/messages")).json()
    refused = await client.patch(f"/v1/agents/{agent['id']}/reset-messages", json={})
    assert refused.status_code == 409, refused.text
    assert "stepping" in refused.json()["detail"]
    assert (await client.get(f"/v1/agents/{agent['id']}/messages")).json() == before


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("reset-messages", {"add_default_initial_messages": "sometimes"}),
        ("generate", {}),
        ("generate", {"prompt": 3}),
    ],
)
async def test_bad_bodies_are_422(client: httpx.AsyncClient, path: str, body: dict[str, object]) -> None:
    agent = (await client.post("/v1/agents/", json={"name": "a", "model": MODEL, "agent_type": MEMGPT})).json()
    method = client.patch if path == "reset-messages" else client.post
    answer = await method(f"/v1/agents/{agent['id']}/{path}", json=body)
    assert answer.status_code == 422, answer.text
    assert len((await client.get(f"/v1/agents/{agent['id']}/messages")).json()) == 5  # nothing lost


@sqlite_only
async def test_bad_initial_messages_are_422_and_nothing_is_created(client: httpx.AsyncClient) -> None:
    for sequence in ([{"role": "tool", "content": "x"}], [{"role": "user"}], "hello"):
        answer = await client.post(
            "/v1/agents/",
            json={"name": "a", "model": MODEL, "initial_message_sequence": sequence},
        )
        assert answer.status_code == 422, answer.text
    assert (await client.get("/v1/agents/")).json() == []
