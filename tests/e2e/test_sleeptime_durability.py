"""Sleep-time work survives ``kill -9``: due but not gathered, and gathered with its batch open.

Three ``nightshift serve`` processes on one database, one after the other. The first steps the
main agents' turn (which makes their sleep-time agents due) and is killed before it gathers them
(its gathering interval is an hour). The second gathers them at once and submits their batch,
which the emulator holds open; it is killed too. The third applies it. Each sleep-time agent is
asked once, one sleep-time run and one provider batch exist, and each shared block holds its
fact once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from support.api import json_list, json_object
from support.processes import Servers, batch_creates, server_environment
from support.runs import ANTHROPIC_MODEL, Runs

pytestmark = pytest.mark.slow  # kills and restarts servers

AGENTS = 3
RUN_TIMEOUT = 60.0  # a deadline only
BATCH_SECONDS = 5.0


def _client(base_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=30)


async def _sleeptime_runs(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    return json_list(await client.get("/v1/messages/batches", params={"kind": "sleeptime"}))


async def test_sleeptime_work_is_done_once_across_kills(
    db_url: str, tmp_path: Path, emulator: str, admin: EmulatorAdmin
) -> None:
    env = server_environment(db_url, tmp_path / "home", NIGHTSHIFT_LEASE_SECONDS="3")
    servers = Servers(env, tmp_path)
    try:
        first = await servers.start("first", NIGHTSHIFT_SLEEPTIME_INTERVAL_SECONDS="3600")
        async with _client(first.base_url) as client:
            runs = Runs(client)
            mains = [
                await runs.agent(f"pal-{i}", model=ANTHROPIC_MODEL, agent_type="letta_v1_agent", enable_sleeptime=True)
                for i in range(AGENTS)
            ]
            sleepers = {}
            for main in mains:
                group = main["managed_group"]
                changed = await client.patch(
                    f"/v1/groups/{group['id']}",
                    json={"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 1}},
                )
                assert changed.status_code == 200, changed.text
                (sleepers[main["id"]],) = group["agent_ids"]
            for main in mains:
                call = ScriptedToolCall(
                    name="memory_insert", arguments={"label": "human", "new_str": f"{main['name']} likes teal"}
                )
                done = ScriptedToolCall(name="memory_finish_edits", arguments={})
                await admin.script(sleepers[main["id"]], ScriptedReply(tool_call=call), ScriptedReply(tool_call=done))
            run = await runs.start([{"agent_id": m["id"], "input": "I like teal."} for m in mains])
            assert (await runs.wait(run["id"], timeout=RUN_TIMEOUT))["status"] == "completed"
            assert await _sleeptime_runs(client) == []  # due, not gathered: its interval is an hour
        first.kill()

        # The second gathers them at once, submits their batch, and dies with it open (it ends at
        # the provider a few seconds after it was made, by when the third server is up).
        await admin.configure(seconds_to_end=BATCH_SECONDS)
        second = await servers.start("second", NIGHTSHIFT_SLEEPTIME_INTERVAL_SECONDS="0")
        async with _client(second.base_url) as client:

            async def submitted() -> bool:
                found = await _sleeptime_runs(client)
                return bool(found) and found[0]["status"] == "running"

            deadline = time.monotonic() + RUN_TIMEOUT
            while not await submitted():
                assert time.monotonic() < deadline, "the sleep-time run was not submitted"
                await asyncio.sleep(0.05)
        second.kill()
        await admin.configure(seconds_to_end=0.0)

        third = await servers.start("third", NIGHTSHIFT_SLEEPTIME_INTERVAL_SECONDS="0")
        async with _client(third.base_url) as client:
            runs = Runs(client)
            (sleeping,) = await _sleeptime_runs(client)
            ended = await runs.wait(sleeping["id"], timeout=RUN_TIMEOUT)
            assert ended["status"] == "completed", ended
            assert len(ended["progress"]["provider_batches"]) == 2  # its two steps, one batch each
            assert await _sleeptime_runs(client) == [ended]
            asked = Counter(
                c["custom_id"] for c in await admin.model_calls() if c["custom_id"] in set(sleepers.values())
            )
            assert asked == dict.fromkeys(sleepers.values(), 2), "a sleep-time step was asked twice"
            for main in mains:
                human = json_object(await client.get(f"/v1/agents/{main['id']}/core-memory/blocks/human"))
                assert human["value"].count(f"{main['name']} likes teal") == 1, human["value"]
        # The main run's batch, then the sleep-time run's two steps: nothing submitted twice.
        assert len(await batch_creates(admin)) == 3
    finally:
        servers.kill_all()
