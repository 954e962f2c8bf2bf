"""GET /v1/messages/batches: runs of every status, filtered by status, paged."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import HttpFault
from nightshift.store.keys import create_key
from nightshift.store.orgs import get_or_create_org
from support.api import json_list
from support.runs import Runs


async def _list(runs: Runs, **params: Any) -> list[dict[str, Any]]:
    return json_list(await runs.client.get("/v1/messages/batches", params=params))


async def _one_of_each_status(runs: Runs, admin: EmulatorAdmin) -> dict[str, str]:
    """Run ids by status: completed, failed, cancelled, running and created (in creation order)."""
    ids: dict[str, str] = {}
    agents = [await runs.agent(f"l{i}") for i in range(5)]

    completed = await runs.start([{"agent_id": agents[0]["id"], "input": "hi"}])
    ids["completed"] = (await runs.wait(completed["id"]))["id"]

    await admin.configure(errors={agents[1]["id"]: "invalid_request_error"})
    failed = await runs.start([{"agent_id": agents[1]["id"], "input": "hi"}])
    assert (await runs.wait(failed["id"]))["status"] == "failed"
    ids["failed"] = failed["id"]

    await admin.configure(polls_to_end=1000)
    cancelled = await runs.start([{"agent_id": agents[2]["id"], "input": "hi"}])
    response = await runs.client.patch(f"/v1/messages/batches/{cancelled['id']}/cancel")
    assert response.json()["status"] == "cancelled"
    ids["cancelled"] = cancelled["id"]

    running = await runs.start([{"agent_id": agents[3]["id"], "input": "hi"}])
    assert running["status"] == "running"
    ids["running"] = running["id"]

    # The provider refuses the submission for now: the run stays created until it is retried.
    await admin.fault(HttpFault(path="/v1/messages/batches", method="POST", status=529, should_retry=False))
    created = await runs.start([{"agent_id": agents[4]["id"], "input": "hi"}])
    assert created["status"] == "created", created
    assert created["progress"]["provider_batches"][0]["error"]
    ids["created"] = created["id"]
    return ids


async def test_list_filter_and_page_runs(runs: Runs, admin: EmulatorAdmin) -> None:
    ids = await _one_of_each_status(runs, admin)
    in_order = list(ids.values())

    listed = await _list(runs)
    assert [r["id"] for r in listed] == in_order  # oldest first by default
    assert {r["id"]: r["status"] for r in listed} == {v: k for k, v in ids.items()}
    assert [r["id"] for r in await _list(runs, order="desc")] == in_order[::-1]

    for status, run_id in ids.items():
        assert [r["id"] for r in await _list(runs, status=status)] == [run_id]
    both = await _list(runs, status=["completed", "cancelled"])
    assert [r["id"] for r in both] == [ids["completed"], ids["cancelled"]]
    assert (await runs.client.get("/v1/messages/batches", params={"status": "exploded"})).status_code == 422

    for order, expected in (("asc", in_order), ("desc", in_order[::-1])):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await _list(runs, order=order, limit=2, **({"after": cursor} if cursor else {}))
            assert len(page) <= 2
            if not page:
                break
            seen.extend(r["id"] for r in page)
            cursor = page[-1]["id"]
        assert seen == expected, order
    assert [r["id"] for r in await _list(runs, before=in_order[3], limit=2)] == in_order[1:3]
    assert [r["id"] for r in await _list(runs, after=in_order[0], before=in_order[3])] == in_order[1:3]
    assert [r["id"] for r in await _list(runs, status="running", after=ids["running"])] == []

    # A run cancelled before its first step reached the provider is cancelled at once too.
    for run_id in (ids["running"], ids["created"]):
        cancelled = (await runs.client.patch(f"/v1/messages/batches/{run_id}/cancel")).json()
        assert cancelled["status"] == "cancelled"
        assert [b["status"] for b in cancelled["progress"]["provider_batches"]] == ["cancelled"]
    assert {r["status"] for r in await _list(runs)} == {"completed", "failed", "cancelled"}


async def test_runs_are_listed_per_organization(runs: Runs, app: FastAPI) -> None:
    assert await _list(runs) == []
    async with app.state.nightshift.engine.begin() as conn:
        other = await get_or_create_org(conn, "other-org")
        await create_key(conn, other.id, "eve", "key-of-other-org")
    theirs = {"Authorization": "Bearer key-of-other-org"}
    agent = await runs.agent("ours")
    run = await runs.start([{"agent_id": agent["id"], "input": "hi"}])
    await runs.wait(run["id"])
    assert [r["id"] for r in await _list(runs)] == [run["id"]]
    assert (await runs.client.get("/v1/messages/batches", headers=theirs)).json() == []
    for response in (
        await runs.client.get(f"/v1/messages/batches/{run['id']}", headers=theirs),
        await runs.client.get(f"/v1/messages/batches/{run['id']}/messages", headers=theirs),
        await runs.client.patch(f"/v1/messages/batches/{run['id']}/cancel", headers=theirs),
    ):
        assert response.status_code == 404, response.text
    assert (await runs.client.get("/v1/messages/batches/batch-unknown")).status_code == 404
