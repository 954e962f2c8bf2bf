"""A run's ``callback_url`` is POSTed once when the run ends; failures are retried and recorded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from integration.batch.kit import wait_for
from nightshift.batch.callbacks import MAX_ATTEMPTS
from nightshift.batch.poller import poll_once
from nightshift.emulator import EmulatorAdmin
from nightshift.serving import running_server
from support.api import json_object
from support.clock import clock_of
from support.ports import silent_server
from support.runs import Runs

# The receivers listen on loopback, which callbacks may only reach when the operator allows it.
pytestmark = pytest.mark.settings(callback_allow_private=True)
# Short retry delays keep the retry tests fast: 0.05, 0.1, 0.2, 0.4 s.
FAST_RETRIES = pytest.mark.settings(callback_retry_seconds=0.05)


class Receiver:
    """A tiny HTTP endpoint that records the bodies POSTed to it and answers the statuses queued."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])

    async def _hook(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self._lock:
            self.bodies.append(body)
            status = self.statuses.pop(0) if self.statuses else 200
        return JSONResponse({"ok": status == 200}, status_code=status)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    hook = Receiver()
    with running_server(hook.app) as url:
        yield hook, f"{url}/hook"


async def later_passes(app: FastAPI, count: int = 3) -> None:
    """``count`` more passes of the poller, each an hour after the last: whatever callback could
    still be due (a retry) is sent by then."""
    state = app.state.nightshift
    for _ in range(count):
        clock_of(app).advance(3600)
        await poll_once(state.worker, state.callbacks)


async def _ended_with_callback(runs: Runs, run_id: str) -> dict[str, Any]:
    """The run once it ended and its callback outcome was recorded."""
    await runs.wait(run_id)
    return await _once_set(runs, run_id, "callback_sent_at")


async def _once_set(runs: Runs, run_id: str, field: str) -> dict[str, Any]:
    """The run once its ``field`` is set."""
    found: dict[str, Any] = {}

    async def recorded() -> bool:
        found.update(json_object(await runs.client.get(f"/v1/messages/batches/{run_id}")))
        return found[field] is not None

    await wait_for(recorded)
    return found


async def test_callback_is_posted_once_when_the_run_ends(
    runs: Runs, receiver: tuple[Receiver, str], app: FastAPI
) -> None:
    hook, url = receiver
    agent = await runs.agent("called-back")
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}], callback_url=url)
    assert run["callback_url"] == url
    assert run["callback_sent_at"] is None
    done = await _ended_with_callback(runs, run["id"])
    assert done["status"] == "completed"
    assert done["callback_status_code"] == 200
    assert done["callback_error"] is None
    await later_passes(app)  # nothing is sent again
    assert hook.bodies == [{"job_id": run["id"], "status": "completed", "completed_at": hook.bodies[0]["completed_at"]}]
    assert hook.bodies[0]["completed_at"] is not None


async def test_callback_of_a_failed_run(runs: Runs, admin: EmulatorAdmin, receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    agent = await runs.agent("failing")
    await admin.configure(errors={agent["id"]: "invalid_request_error"})
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}], callback_url=url)
    done = await _ended_with_callback(runs, run["id"])
    assert done["status"] == "failed"
    assert [b["status"] for b in hook.bodies] == ["failed"]


async def test_no_callback_without_a_url(runs: Runs, receiver: tuple[Receiver, str], app: FastAPI) -> None:
    hook, _ = receiver
    agent = await runs.agent("quiet")
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    done = await runs.wait(run["id"])
    await later_passes(app)
    assert done["callback_url"] is None
    assert (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()["callback_sent_at"] is None
    assert hook.bodies == []


@FAST_RETRIES
async def test_a_failing_callback_is_retried_until_it_succeeds(runs: Runs, receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    hook.statuses = [500, 500]
    agent = await runs.agent("retried")
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}], callback_url=url)
    done = await _ended_with_callback(runs, run["id"])
    assert done["callback_status_code"] == 200
    assert done["callback_error"] is None
    assert len(hook.bodies) == 3
    assert all(b["job_id"] == run["id"] and b["status"] == "completed" for b in hook.bodies)


@FAST_RETRIES
async def test_a_callback_that_keeps_failing_is_given_up_and_recorded(
    runs: Runs, receiver: tuple[Receiver, str], app: FastAPI
) -> None:
    hook, url = receiver
    hook.statuses = [500] * 10
    agent = await runs.agent("ignored")
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}], callback_url=url)
    done = await _ended_with_callback(runs, run["id"])
    assert done["callback_status_code"] == 500
    assert done["callback_error"] == "callback answered HTTP 500"
    await later_passes(app)
    assert len(hook.bodies) == MAX_ATTEMPTS


@FAST_RETRIES
async def test_an_unreachable_callback_is_recorded(runs: Runs, refused_port: int) -> None:
    agent = await runs.agent("nobody-home")
    url = f"http://127.0.0.1:{refused_port}/hook"
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}], callback_url=url)
    done = await _ended_with_callback(runs, run["id"])
    assert done["callback_status_code"] is None
    assert done["callback_error"].startswith("callback failed: ConnectError")


async def test_a_callback_that_gets_no_answer_holds_back_no_other_run(
    runs: Runs, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    async with silent_server() as silent:
        stuck = await runs.agent("stuck")
        first = await runs.start(
            [{"agent_id": stuck["id"], "input": "hello"}], callback_url=f"http://127.0.0.1:{silent.port}/"
        )
        await runs.wait(first["id"])
        async with asyncio.timeout(10):
            await silent.accepted.wait()  # its callback waits for an answer
        # Another run steps to its end and is called back meanwhile: each attempt of the first
        # callback could wait 10 s for an answer, which the poller does not wait for.
        other = await runs.agent("other")
        second = await runs.start([{"agent_id": other["id"], "input": "hello"}], callback_url=url)
        done = await _ended_with_callback(runs, second["id"])
        assert done["callback_status_code"] == 200
        assert [b["job_id"] for b in hook.bodies] == [second["id"]]
        waiting = json_object(await runs.client.get(f"/v1/messages/batches/{first['id']}"))
        assert (waiting["callback_sent_at"], waiting["callback_error"]) == (None, None)
        silent.hang_up()  # the first callback's attempt fails now, and is recorded
        failed = await _once_set(runs, first["id"], "callback_error")
    assert failed["callback_error"].startswith("callback failed: RemoteProtocolError")
