"""A run's record outlives its agents, and the list of runs finds those in which agents failed.

Deleting an agent leaves what its runs did as it was: the run's counts, tokens, costs, failures and
per-step figures; the run's failures and agents still list it, by the name it had, marked deleted.
A block made on its own (``POST /v1/blocks``) is not deleted with an agent it was attached to; the
blocks made with the agent (``memory_blocks``) are, unless another agent uses them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from integration.batch.kit import mixed_run, say
from integration.batch.test_run_summaries import step
from nightshift.emulator import EmulatorAdmin
from support.api import json_list, json_object
from support.runs import Runs


def _without_deleted_marks(run: dict[str, Any]) -> dict[str, Any]:
    """The run's progress with its failures' ``agent_deleted`` left out (the one thing that changes)."""
    progress = dict(run["progress"])
    progress["failures"] = [{k: v for k, v in f.items() if k != "agent_deleted"} for f in progress["failures"]]
    return progress


async def test_a_runs_record_survives_the_deletion_of_its_agents(runs: Runs, admin: EmulatorAdmin) -> None:
    mixed = await mixed_run(runs, admin)
    run = done = mixed.run
    bad, two_steps, one_step = mixed.bad, mixed.two_steps, mixed.one_step
    assert done["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 1, "cancelled": 0}
    assert done["progress"]["cost_usd"] > 0 and len(done["progress"]["provider_batches"]) == 2
    agents_before = (await runs.client.get(f"/v1/messages/batches/{run['id']}/agents")).json()["agents"]
    assert [a["agent_deleted"] for a in agents_before] == [False, False, False]

    for agent in (bad, two_steps, one_step):
        assert (await runs.client.delete(f"/v1/agents/{agent['id']}")).status_code == 200

    after = json_object(await runs.client.get(f"/v1/messages/batches/{run['id']}"))
    assert after["status"] == "completed"
    # Counts, tokens, costs, failures and each step's tokens and cost: as they were.
    assert _without_deleted_marks(after) == _without_deleted_marks(done)
    (failure,) = after["progress"]["failures"]
    assert (failure["agent_id"], failure["agent_name"], failure["agent_deleted"]) == (bad["id"], "bad", True)
    assert "invalid_request_error" in failure["error"]
    # The run's agents: all there, by the names they had, marked deleted, their figures unchanged.
    agents_after = (await runs.client.get(f"/v1/messages/batches/{run['id']}/agents")).json()["agents"]
    assert [a["agent_deleted"] for a in agents_after] == [True, True, True]
    assert [{**a, "agent_deleted": False} for a in agents_after] == agents_before
    # A page of them after one of them, as before.
    page = (
        await runs.client.get(
            f"/v1/messages/batches/{run['id']}/agents", params={"after": agents_before[0]["agent_id"], "limit": 1}
        )
    ).json()["agents"]
    assert [a["agent_name"] for a in page] == [agents_before[1]["agent_name"]]
    # In the list of runs too.
    listed = json_list(await runs.client.get("/v1/messages/batches"))
    assert _without_deleted_marks(listed[0]) == _without_deleted_marks(done)


@pytest.mark.settings(poller=False)  # the test drives the worker: the step is open until it does
async def test_an_agent_deleted_during_its_step_is_cancelled_there_and_the_run_goes_on(
    runs: Runs, admin: EmulatorAdmin, app: FastAPI
) -> None:
    stays = await runs.agent("stays")
    goes = await runs.agent("goes")
    await admin.script(stays["id"], say("done"))
    await admin.script(goes["id"], say("never applied"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (stays, goes)])
    assert (await runs.client.delete(f"/v1/agents/{goes['id']}")).status_code == 200
    opened = json_object(await runs.client.get(f"/v1/messages/batches/{run['id']}"))
    assert opened["progress"]["agents"]["cancelled"] == 1 and opened["progress"]["agents"]["running"] == 1

    await step(app)  # the provider's answer for both: one applied, one ignored
    done = json_object(await runs.client.get(f"/v1/messages/batches/{run['id']}"))
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 0, "cancelled": 1}
    listed = (await runs.client.get(f"/v1/messages/batches/{run['id']}/agents")).json()["agents"]
    agents = {a["agent_name"]: a for a in listed}
    assert agents["goes"]["state"] == "cancelled" and agents["goes"]["agent_deleted"] is True
    assert agents["goes"]["error"] == "the agent was deleted"
    assert agents["stays"]["state"] == "finished" and agents["stays"]["agent_deleted"] is False


async def test_the_failures_filter_finds_completed_runs_with_failed_agents(runs: Runs, admin: EmulatorAdmin) -> None:
    ok, bad, worse = await runs.agent("ok"), await runs.agent("bad"), await runs.agent("worse")
    await admin.configure(errors={bad["id"]: "invalid_request_error", worse["id"]: "invalid_request_error"})
    await admin.script(ok["id"], say("hello"), say("hello again"))
    clean = await runs.wait((await runs.start([{"agent_id": ok["id"], "input": "hi"}]))["id"])
    mixed = await runs.wait((await runs.start([{"agent_id": a["id"], "input": "hi"} for a in (ok, bad)]))["id"])
    failed = await runs.wait((await runs.start([{"agent_id": worse["id"], "input": "hi"}]))["id"])
    assert [r["status"] for r in (clean, mixed, failed)] == ["completed", "completed", "failed"]
    assert mixed["progress"]["agents"]["failed"] == 1

    async def listed(**params: Any) -> list[str]:
        return [r["id"] for r in json_list(await runs.client.get("/v1/messages/batches", params=params))]

    assert await listed(has_failures="true") == [mixed["id"], failed["id"]]
    assert await listed(has_failures="false") == [clean["id"]]
    # Letta's statuses are unchanged: a run with a failed agent is completed; it combines with them.
    assert await listed(status="failed") == [failed["id"]]
    assert await listed(status="completed", has_failures="true") == [mixed["id"]]
    assert await listed() == [clean["id"], mixed["id"], failed["id"]]
    response = await runs.client.get("/v1/messages/batches", params={"has_failures": "maybe"})
    assert response.status_code == 422, response.text


async def test_a_standalone_block_outlives_the_agents_it_was_attached_to(client: httpx.AsyncClient) -> None:
    standalone = json_object(await client.post("/v1/blocks/", json={"label": "team", "value": "We ship on Fridays."}))
    later = json_object(await client.post("/v1/blocks/", json={"label": "notes", "value": "Attached later."}))
    body = {"model": "anthropic/claude-3-5-haiku-20241022", "block_ids": [standalone["id"]]}
    owner = json_object(
        await client.post(
            "/v1/agents/", json={**body, "name": "owner", "memory_blocks": [{"label": "persona", "value": "I own it."}]}
        )
    )
    attached = await client.patch(f"/v1/agents/{owner['id']}/core-memory/blocks/attach/{later['id']}")
    assert attached.status_code == 200, attached.text
    (own,) = [b for b in owner["blocks"] if b["label"] == "persona"]

    assert (await client.delete(f"/v1/agents/{owner['id']}")).status_code == 200
    # Made on their own, attached at creation or later: they stay, with no agent.
    for block in (standalone, later):
        kept = await client.get(f"/v1/blocks/{block['id']}")
        assert kept.status_code == 200, kept.text
        assert kept.json()["value"] == block["value"]
        assert (await client.get(f"/v1/blocks/{block['id']}/agents")).json() == []
    # Made with the agent, used by no other: it goes with it.
    assert (await client.get(f"/v1/blocks/{own['id']}")).status_code == 404
