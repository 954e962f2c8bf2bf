"""A pending approval survives a ``nightshift serve`` killed with SIGKILL and started again.

Two agents wait for approval of a memory edit when the server dies: one stopped by a synchronous
send, one by a batch run. The restarted server still refuses them plain messages, and their
answers (the first by a batch run, the second by a synchronous send) run the edits once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.processes import Server, Servers, server_environment
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL

pytestmark = pytest.mark.slow  # kills and restarts a server

RUN_TIMEOUT = 60.0
ASK = [{"role": "user", "content": "Please remember that my cat is called Tom"}]


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    """Servers on one fresh database, pointed at the (reset) emulator; stopped at the end."""
    group = Servers(server_environment(db_url, tmp_path / "home"), tmp_path)
    yield group
    group.kill_all()  # what the test checks is done: a graceful stop would only be waited for


def _client(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.base_url, timeout=30)


async def _careful_agent(http: httpx.AsyncClient, name: str, model: str) -> str:
    """An agent whose core_memory_append calls wait for approval."""
    body = {
        "agent_type": "memgpt_v2_agent",
        "name": name,
        "model": model,
        "memory_blocks": [{"label": "human", "value": "?"}],
    }
    created = await http.post("/v1/agents/", json=body)
    assert created.status_code == 200, created.text
    agent_id = str(created.json()["id"])
    gated = await http.patch(
        f"/v1/agents/{agent_id}/tools/approval/core_memory_append", json={"requires_approval": True}
    )
    assert gated.status_code == 200, gated.text
    return agent_id


async def _last(http: httpx.AsyncClient, agent_id: str) -> dict[str, Any]:
    listed = await http.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 100})
    assert listed.status_code == 200, listed.text
    return dict(listed.json()[-1])


async def _human(http: httpx.AsyncClient, agent_id: str) -> str:
    block = await http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")
    assert block.status_code == 200, block.text
    return str(block.json()["value"])


async def _ended_run(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    created = await http.post("/v1/messages/batches", json=body)
    assert created.status_code == 200, created.text
    deadline = time.monotonic() + RUN_TIMEOUT
    while (run := (await http.get(f"/v1/messages/batches/{created.json()['id']}")).json())["status"] in (
        "created",
        "running",
    ):
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)
    return dict(run)


async def test_a_pending_approval_survives_a_restart(servers: Servers) -> None:
    first = await servers.start("first")
    async with _client(first) as http:
        by_send = await _careful_agent(http, "by-send", OPENAI_MODEL)
        by_run = await _careful_agent(http, "by-run", ANTHROPIC_MODEL)
        sent = await http.post(f"/v1/agents/{by_send}/messages", json={"messages": ASK})
        assert sent.json()["stop_reason"]["stop_reason"] == "requires_approval", sent.text
        run = await _ended_run(http, {"requests": [{"agent_id": by_run, "messages": ASK}]})
        assert run["progress"]["agents"]["awaiting_approval"] == 1, run["progress"]
        pending = {agent_id: await _last(http, agent_id) for agent_id in (by_send, by_run)}
    assert all(p["message_type"] == "approval_request_message" for p in pending.values()), pending
    first.kill()

    second = await servers.start("second")
    async with _client(second) as http:
        for agent_id, request in pending.items():
            assert await _last(http, agent_id) == request
            refused = await http.post(f"/v1/agents/{agent_id}/messages", json={"messages": ASK})
            assert refused.status_code == 409, refused.text
            assert "Tom" not in await _human(http, agent_id)
        approve = {"type": "approval", "approve": True}
        answered = await _ended_run(http, {"requests": [{"agent_id": by_send, "messages": [approve]}]})
        assert answered["progress"]["agents"]["finished"] == 1, answered["progress"]
        sent = await http.post(f"/v1/agents/{by_run}/messages", json={"messages": [approve]})
        assert sent.status_code == 200, sent.text
        assert sent.json()["stop_reason"]["stop_reason"] == "end_turn"
        for agent_id in pending:
            human = await _human(http, agent_id)
            assert human.count("Tom") == 1, human
