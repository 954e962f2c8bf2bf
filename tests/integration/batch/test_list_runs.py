"""GET /v1/messages/batches: runs of every status, filtered by status, paged."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI

from nightshift.store.keys import create_key
from nightshift.store.orgs import get_or_create_org
from support.api import json_list
from support.stepped import SteppedRuns


async def _list(stepped: SteppedRuns, **params: Any) -> list[dict[str, Any]]:
    return json_list(await stepped.client.get("/v1/messages/batches", params=params))


async def _one_of_each_status(stepped: SteppedRuns) -> dict[str, str]:
    """Run ids by status: completed, failed, cancelled, running and created (in creation order)."""
    ids: dict[str, str] = {}
    agents = [await stepped.agent(f"l{i}") for i in range(5)]

    completed = await stepped.start([{"agent_id": agents[0]["id"], "input": "hi"}])
    ids["completed"] = (await stepped.finish(completed["id"]))["id"]

    stepped.model.configure(errors={agents[1]["id"]: "invalid_request_error"})
    failed = await stepped.start([{"agent_id": agents[1]["id"], "input": "hi"}])
    assert (await stepped.finish(failed["id"]))["status"] == "failed"
    ids["failed"] = failed["id"]

    cancelled = await stepped.start([{"agent_id": agents[2]["id"], "input": "hi"}])
    response = await stepped.client.patch(f"/v1/messages/batches/{cancelled['id']}/cancel")
    assert response.json()["status"] == "cancelled"
    ids["cancelled"] = cancelled["id"]

    running = await stepped.start([{"agent_id": agents[3]["id"], "input": "hi"}])
    assert running["status"] == "running"
    ids["running"] = running["id"]

    # The provider refuses the submission for now: the run stays created until it is retried.
    stepped.model.refuse_submits("overloaded_error")
    created = await stepped.start([{"agent_id": agents[4]["id"], "input": "hi"}])
    assert created["status"] == "created", created
    assert created["progress"]["provider_batches"][0]["error"]
    ids["created"] = created["id"]
    return ids


async def test_list_filter_and_page_runs(stepped: SteppedRuns) -> None:
    ids = await _one_of_each_status(stepped)
    in_order = list(ids.values())

    listed = await _list(stepped)
    assert [r["id"] for r in listed] == in_order  # oldest first by default
    assert {r["id"]: r["status"] for r in listed} == {v: k for k, v in ids.items()}
    assert [r["id"] for r in await _list(stepped, order="desc")] == in_order[::-1]

    for status, run_id in ids.items():
        assert [r["id"] for r in await _list(stepped, status=status)] == [run_id]
    both = await _list(stepped, status=["completed", "cancelled"])
    assert [r["id"] for r in both] == [ids["completed"], ids["cancelled"]]
    assert (await stepped.client.get("/v1/messages/batches", params={"status": "exploded"})).status_code == 422

    for order, expected in (("asc", in_order), ("desc", in_order[::-1])):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await _list(stepped, order=order, limit=2, **({"after": cursor} if cursor else {}))
            assert len(page) <= 2
            if not page:
                break
            seen.extend(r["id"] for r in page)
            cursor = page[-1]["id"]
        assert seen == expected, order
    assert [r["id"] for r in await _list(stepped, before=in_order[3], limit=2)] == in_order[1:3]
    assert [r["id"] for r in await _list(stepped, after=in_order[0], before=in_order[3])] == in_order[1:3]
    assert [r["id"] for r in await _list(stepped, status="running", after=ids["running"])] == []

    # A run cancelled before its first step reached the provider is cancelled at once too.
    for run_id in (ids["running"], ids["created"]):
        cancelled = (await stepped.client.patch(f"/v1/messages/batches/{run_id}/cancel")).json()
        assert cancelled["status"] == "cancelled"
        assert [b["status"] for b in cancelled["progress"]["provider_batches"]] == ["cancelled"]
    assert {r["status"] for r in await _list(stepped)} == {"completed", "failed", "cancelled"}


async def test_runs_are_listed_per_organization(stepped: SteppedRuns, stepped_app: FastAPI) -> None:
    assert await _list(stepped) == []
    async with stepped_app.state.nightshift.engine.begin() as conn:
        other = await get_or_create_org(conn, "other-org", datetime.now(UTC))
        await create_key(conn, other.id, "eve", "key-of-other-org", now=datetime.now(UTC))
    theirs = {"Authorization": "Bearer key-of-other-org"}
    agent = await stepped.agent("ours")
    run = await stepped.start([{"agent_id": agent["id"], "input": "hi"}])
    await stepped.finish(run["id"])
    assert [r["id"] for r in await _list(stepped)] == [run["id"]]
    assert (await stepped.client.get("/v1/messages/batches", headers=theirs)).json() == []
    for response in (
        await stepped.client.get(f"/v1/messages/batches/{run['id']}", headers=theirs),
        await stepped.client.get(f"/v1/messages/batches/{run['id']}/messages", headers=theirs),
        await stepped.client.patch(f"/v1/messages/batches/{run['id']}/cancel", headers=theirs),
    ):
        assert response.status_code == 404, response.text
    assert (await stepped.client.get("/v1/messages/batches/batch-unknown")).status_code == 404
