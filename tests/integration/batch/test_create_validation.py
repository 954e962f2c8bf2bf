"""Bad input for POST /v1/messages/batches: a 4xx a person can act on, and nothing written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
from fastapi import FastAPI

from nightshift.emulator import EmulatorAdmin
from nightshift.store.keys import create_key
from nightshift.store.orgs import get_or_create_org
from support.runs import Runs


async def _refused(client: httpx.AsyncClient, body: Any, status: int, *, raw: bytes | None = None) -> str:
    """POST a bad run; check the status and that the body says what is wrong; returns the detail."""
    if raw is not None:
        response = await client.post("/v1/messages/batches", content=raw, headers={"content-type": "application/json"})
    else:
        response = await client.post("/v1/messages/batches", json=body)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail
    assert "Traceback" not in response.text
    return detail


async def _nothing_written(runs: Runs, agents: list[dict[str, Any]], before: list[list[dict[str, Any]]]) -> None:
    assert (await runs.client.get("/v1/messages/batches")).json() == []
    assert [await runs.context(a["id"]) for a in agents] == before


BAD_BODIES: list[tuple[Any, int, str]] = [
    (None, 422, "body"),
    ({}, 422, "requests"),
    ({"requests": "agent-1"}, 422, "requests"),
    ({"requests": []}, 422, "at least one request"),
    ({"requests": [{"agent_id": 7, "input": "hi"}]}, 422, "agent_id"),
    ({"requests": [{"input": "hi"}]}, 422, "agent_id"),
    ({"requests": [{"agent_id": "AGENT", "messages": "hi"}]}, 422, "messages"),
    ({"requests": [{"agent_id": "AGENT", "messages": [{"role": "robot", "content": "hi"}]}]}, 422, "role"),
    ({"requests": [{"agent_id": "AGENT", "messages": []}]}, 422, "no message text"),
    ({"requests": [{"agent_id": "AGENT"}]}, 422, "no message text"),
    ({"requests": [{"agent_id": "AGENT", "input": "   "}]}, 422, "no message text"),
    ({"requests": [{"agent_id": "AGENT", "messages": [{"role": "user", "content": ""}]}]}, 422, "no message text"),
    ({"requests": [{"agent_id": "AGENT", "input": "hi", "max_steps": 0}]}, 422, "max_steps"),
    ({"requests": [{"agent_id": "AGENT", "input": "hi"}], "callback_url": "not a url"}, 422, "callback_url"),
    ({"requests": [{"agent_id": "AGENT", "input": "hi"}, {"agent_id": "AGENT", "input": "x"}]}, 422, "once"),
    ({"requests": [{"agent_id": "agent-nope", "input": "x"}]}, 404, "agent-nope"),
    # One bad request refuses the whole run: the good agent gets nothing either.
    ({"requests": [{"agent_id": "AGENT", "input": "hi"}, {"agent_id": "agent-nope", "input": "x"}]}, 404, "agent-nope"),
]


async def test_bad_input_is_refused_and_nothing_is_written(runs: Runs) -> None:
    agent = await runs.agent("target")
    before = [await runs.context(agent["id"])]
    for body, status, says in BAD_BODIES:
        filled = _fill(body, agent["id"])
        detail = await _refused(runs.client, filled, status, raw=b"" if body is None else None)
        assert says.lower() in detail.lower(), (body, detail)
        await _nothing_written(runs, [agent], before)


def _fill(value: Any, agent_id: str) -> Any:
    if value == "AGENT":
        return agent_id
    if isinstance(value, dict):
        return {k: _fill(v, agent_id) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, agent_id) for v in value]
    return value


async def test_another_organizations_agent_is_not_found(runs: Runs, app: FastAPI) -> None:
    mine = await runs.agent("mine")
    before = [await runs.context(mine["id"])]
    async with app.state.nightshift.engine.begin() as conn:
        other = await get_or_create_org(conn, "other-org", datetime.now(UTC))
        await create_key(conn, other.id, "mallory", "key-of-other-org", now=datetime.now(UTC))
    headers = {"Authorization": "Bearer key-of-other-org"}
    response = await runs.client.post(
        "/v1/messages/batches", json={"requests": [{"agent_id": mine["id"], "input": "hi"}]}, headers=headers
    )
    assert response.status_code == 404, response.text
    assert mine["id"] in response.json()["detail"]
    assert (await runs.client.get("/v1/messages/batches", headers=headers)).json() == []
    await _nothing_written(runs, [mine], before)


async def test_an_agent_in_an_open_step_is_refused_with_409(runs: Runs, admin: EmulatorAdmin) -> None:
    busy = await runs.agent("busy")
    idle = await runs.agent("idle")
    await admin.configure(polls_to_end=1000)
    first = await runs.start([{"agent_id": busy["id"], "input": "take your time"}])
    before = await runs.context(idle["id"])
    response = await runs.client.post(
        "/v1/messages/batches",
        json={"requests": [{"agent_id": idle["id"], "input": "hi"}, {"agent_id": busy["id"], "input": "again"}]},
    )
    assert response.status_code == 409, response.text
    assert busy["id"] in response.json()["detail"]
    listed = (await runs.client.get("/v1/messages/batches")).json()
    assert [r["id"] for r in listed] == [first["id"]]
    assert await runs.context(idle["id"]) == before
    busy_texts = [m.get("content") for m in await runs.context(busy["id"])]
    assert "again" not in busy_texts
    # Cancel, so that the open step does not outlive the test.
    assert (await runs.client.patch(f"/v1/messages/batches/{first['id']}/cancel")).status_code == 200
