"""``serve``'s poller child (``batch/poller_process.py``) through real processes: forked from the
server (sharing its modules), it dies with the server, a child that exits is replaced by a
``nightshift poll`` that steps runs, and SIGTERM stops both.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nightshift.batch.poller_process import FOLDER_PREFIX
from support.processes import Server, Servers, server_environment
from support.runs import Runs

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

# A process that starts (or is started again after RESTART_DELAY) on a machine that may be busy.
WAIT = 60


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    (tmp_path / "tmp").mkdir()
    # Started as a user starts one (not forked from a test's process): the tests read its command line.
    env = server_environment(db_url, tmp_path / "home", TMPDIR=str(tmp_path / "tmp"))
    group = Servers(env, tmp_path, forked=False)
    yield group
    group.stop_all()


def figures_folders(tmp_path: Path, server: Server) -> list[Path]:
    """The folders the server's poller children write their figures to."""
    return list((tmp_path / "tmp").glob(f"{FOLDER_PREFIX}{server.process.pid}-*"))


def command_line(pid: int) -> list[str]:
    """A process's arguments; none once it has ended (a zombie has none either)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as found:
            return [part.decode() for part in found.read().split(b"\0") if part]
    except OSError:
        return []


def pollers(server: Server) -> list[int]:
    """The server's children that run nightshift (its poller), not its tool sandboxes (bwrap)."""
    children = server.pids() - {server.process.pid}
    return [pid for pid in children if command_line(pid)[1:3] == ["-m", "nightshift"]]


async def one_poller(server: Server, *, other_than: int | None = None, command: str | None = None) -> int:
    """The server's poller child, once there is exactly one (and not ``other_than``); with
    ``command``, one that runs it (a child being spawned shows the server's command line until
    its exec)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = [
            pid
            for pid in pollers(server)
            if pid != other_than and (command is None or command_line(pid)[3:4] == [command])
        ]
        if len(found) == 1:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{server.name} has no poller child\n{server.log_tail()}")


async def ended(pid: int) -> None:
    deadline = time.monotonic() + WAIT
    while command_line(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        await asyncio.sleep(0.05)


async def test_the_forked_poller_dies_with_its_server(servers: Servers, tmp_path: Path) -> None:
    server = await servers.start("A")
    child = await one_poller(server)
    # Forked, not started anew: the same command line as the server's, under a name of its own.
    assert command_line(child) == command_line(server.process.pid)
    assert Path(f"/proc/{child}/comm").read_text().strip() == "nightshift-poll"
    server.kill()
    await ended(child)
    # Killed, it could not remove its figures' folder: the next server to start does.
    (left,) = figures_folders(tmp_path, server)
    following = await servers.start("B")
    assert not left.exists()
    assert len(figures_folders(tmp_path, following)) == 1


async def test_a_poller_that_exits_is_replaced_and_steps_runs(servers: Servers, tmp_path: Path) -> None:
    server = await servers.start("A")
    forked = await one_poller(server)
    os.kill(forked, signal.SIGKILL)
    replaced = await one_poller(server, other_than=forked, command="poll")
    assert command_line(replaced)[3:6] == ["poll", "--parent", str(server.process.pid)]
    assert f"the poller process {forked} exited with -9" in server.log_path.read_text()

    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        runs = Runs(client)
        agent = await runs.agent("ada")
        run = await runs.start([{"agent_id": agent["id"], "input": "Hello"}])
        assert (await runs.wait(run["id"], timeout=WAIT))["status"] == "completed"

    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=WAIT) == -signal.SIGTERM
    await ended(replaced)
    assert "gave back" in server.log_path.read_text()  # (each process drained: its log says so)
    assert figures_folders(tmp_path, server) == []
