"""Creating a run is safe to retry (Idempotency-Key), and its callback cannot reach private addresses."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from integration.batch.kit import wait_for
from nightshift.batch.callbacks import CallbackRules, send_due_callbacks
from nightshift.domain.batches import BatchRun, BatchRunStatus
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator import EmulatorAdmin
from nightshift.ids import new_id
from nightshift.store import batch_runs as batch_run_store
from nightshift.store.orgs import ensure_default_org
from support.runs import Runs


async def _create(runs: Runs, body: dict[str, Any], key: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return await runs.client.post("/v1/messages/batches", json=body, headers=headers)


async def test_a_retry_with_the_same_key_gets_the_same_run(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("retried")
    await admin.configure(polls_to_end=1000)  # still running when the retry comes
    body = {"requests": [{"agent_id": agent["id"], "input": "hello"}], "metadata": {"n": 1}}

    first = await _create(runs, body, "order-42")
    again = await _create(runs, body, "order-42")
    without_key = await _create(runs, body, None)
    other_body = await _create(runs, {**body, "metadata": {"n": 2}}, "order-42")

    assert first.status_code == again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert without_key.status_code == 409  # the agent is stepping in that run
    assert other_body.status_code == 422 and other_body.json()["field"] == "Idempotency-Key"
    assert first.json()["id"] in other_body.json()["detail"]
    listed = (await runs.client.get("/v1/messages/batches")).json()
    assert [r["id"] for r in listed] == [first.json()["id"]]


async def test_the_same_request_sent_twice_at_once_makes_one_run(runs: Runs, admin: EmulatorAdmin) -> None:
    agents = [await runs.agent(f"twice-{i}") for i in range(3)]
    await admin.configure(polls_to_end=1000)
    body = {"requests": [{"agent_id": a["id"], "input": "hello"} for a in agents]}

    responses = await asyncio.gather(*(_create(runs, body, "same-moment") for _ in range(4)))

    assert [r.status_code for r in responses] == [200] * 4
    assert len({r.json()["id"] for r in responses}) == 1
    assert len((await runs.client.get("/v1/messages/batches")).json()) == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8283/v1/agents",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:192.168.0.1]/hook",
        # IPv6 addresses that carry a private IPv4 address for a translator or tunnel to reach.
        "http://[64:ff9b::a00:1]/hook",  # NAT64, 10.0.0.1
        "http://[64:ff9b:1:a00:1::]/hook",  # local-use NAT64 (/48), 10.0.1.0
        "http://[2002:c0a8:101::1]/hook",  # 6to4, 192.168.1.1
        "http://[::10.0.0.1]/hook",  # IPv4-compatible
    ],
)
async def test_callbacks_to_private_addresses_are_refused(runs: Runs, url: str) -> None:
    agent = await runs.agent("hooked")
    response = await _create(runs, {"requests": [{"agent_id": agent["id"], "input": "hi"}], "callback_url": url}, None)

    assert response.status_code == 422, response.text
    assert response.json()["field"] == "callback_url"
    assert "NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE" in response.json()["detail"]
    assert (await runs.client.get("/v1/messages/batches")).json() == []  # nothing was created


async def test_a_name_that_does_not_resolve_is_refused(runs: Runs) -> None:
    agent = await runs.agent("hooked")
    body = {"requests": [{"agent_id": agent["id"], "input": "hi"}], "callback_url": "https://nowhere.invalid/h"}

    response = await _create(runs, body, None)

    assert response.status_code == 422
    assert "'nowhere.invalid' does not resolve" in response.json()["detail"]


@pytest.mark.settings(callback_allow_private=True, callback_retry_seconds=0.01)
async def test_private_callbacks_when_the_operator_allows_them(runs: Runs) -> None:
    agent = await runs.agent("hooked")
    body = {"requests": [{"agent_id": agent["id"], "input": "hi"}], "callback_url": "http://127.0.0.1:9/hook"}

    response = await _create(runs, body, None)

    assert response.status_code == 200, response.text
    run_id = response.json()["id"]

    async def given_up() -> bool:
        run = (await runs.client.get(f"/v1/messages/batches/{run_id}")).json()
        return run["callback_sent_at"] is not None

    # Allowed here, the callback is tried (nothing listens on port 9) and its failure recorded.
    await wait_for(given_up, timeout=30)
    run = (await runs.client.get(f"/v1/messages/batches/{run_id}")).json()
    assert run["callback_error"].startswith("callback failed: ConnectError")


async def test_the_address_is_checked_again_before_each_attempt(engine: AsyncEngine) -> None:
    # A run created while private callbacks were allowed (or whose name now resolves elsewhere).
    now = datetime.now(UTC)
    run = BatchRun(
        id=new_id("batch"),
        organization_id=DEFAULT_ORG_ID,
        status=BatchRunStatus.COMPLETED,
        max_steps=1,
        callback_url="http://127.0.0.1:9/hook",
        completed_at=now,
        created_at=now,
        updated_at=now,
    )
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        await batch_run_store.insert_run(conn, run)

    attempted = await send_due_callbacks(engine, CallbackRules(allow_private=False))

    assert attempted == 1
    async with engine.connect() as conn:
        stored = await batch_run_store.get_run(conn, DEFAULT_ORG_ID, run.id)
    assert stored is not None and stored.callback_sent_at is not None  # given up at once: it will not change
    assert stored.callback_status_code is None
    assert stored.callback_error is not None and stored.callback_error.startswith(
        "callback not sent: callback_url's host '127.0.0.1' is 127.0.0.1, a loopback, private or reserved address"
    )
