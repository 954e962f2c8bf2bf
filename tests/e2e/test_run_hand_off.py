"""``serve`` hands a new run to its poller process (``POST /v1/messages/batches``): the child writes
the run and its first step and submits it, what it refuses comes back as the same error, and a
run posted while the child is not there is written by the API process instead."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.processes import Server, Servers, server_environment
from support.runs import Runs

INPUT = "Remember that my name is Ada."
# What the API process logs when it writes a run itself, its poller process gone.
WRITTEN_HERE = "this process writes the run"


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    group = Servers(server_environment(db_url, tmp_path / "home"), tmp_path)
    yield group
    group.stop_all()


def poller_child(server: Server) -> int:
    """The process id of ``serve``'s poller process."""
    (child,) = (
        pid for pid in server.pids() - {server.process.pid} if b"poll" in Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    return child


async def test_the_poller_process_writes_the_run_and_its_refusals_come_back(servers: Servers) -> None:
    server = await servers.start("api")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        runs = Runs(client)
        ada, bob = await runs.agent("ada"), await runs.agent("bob")
        post = "/v1/messages/batches"

        unknown = await client.post(post, json={"requests": [{"agent_id": "agent-nobody", "input": INPUT}]})
        assert unknown.status_code == 404, unknown.text
        assert "agent-nobody" in unknown.json()["detail"]
        twice = await client.post(
            post, json={"requests": [{"agent_id": ada["id"], "input": INPUT}, {"agent_id": ada["id"], "input": INPUT}]}
        )
        assert twice.status_code == 422, twice.text
        assert (twice.json()["field"], ada["id"] in twice.json()["detail"]) == ("requests", True)

        run = await runs.start([{"agent_id": ada["id"], "input": INPUT}])
        batches = run["progress"]["provider_batches"]
        assert [(b["status"], b["provider_batch_id"] is not None) for b in batches] == [("running", True)]
        busy = await client.post(post, json={"requests": [{"agent_id": ada["id"], "input": INPUT}]})
        assert busy.status_code == 409, busy.text
        assert ada["id"] in busy.json()["detail"]
        assert (await runs.wait(run["id"]))["status"] == "completed"

        # The refusals wrote nothing: bob was in none of them, and is free for a run of his own.
        listed = (await client.get(post)).json()
        assert [r["id"] for r in listed] == [run["id"]]
        second = await runs.start([{"agent_id": bob["id"], "input": INPUT}])
        assert (await runs.wait(second["id"]))["status"] == "completed"
    assert WRITTEN_HERE not in server.log_path.read_text()


async def test_a_run_posted_while_the_poller_process_is_gone_is_written_here(servers: Servers) -> None:
    server = await servers.start("api")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
        runs = Runs(client)
        ada = await runs.agent("ada")
        child = poller_child(server)
        os.kill(child, signal.SIGKILL)
        # serve starts another after a few seconds; meanwhile the API process writes the run, and
        # the new poller submits it.
        run = await runs.start([{"agent_id": ada["id"], "input": INPUT}])
        assert (await runs.wait(run["id"], timeout=60))["status"] == "completed"
        assert poller_child(server) != child
    assert WRITTEN_HERE in server.log_path.read_text()
