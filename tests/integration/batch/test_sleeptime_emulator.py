"""Sleep-time agents end to end through the emulator: main agents hear their users state facts in
batch runs, one sleep-time run keeps those facts in each main agent's own ``human`` block."""

from __future__ import annotations

from typing import Any

from support.api import json_list, json_object
from support.runs import Runs

USERS = {
    "ada": ("My name is Ada.", "I live in Lyon."),
    "bob": ("My name is Bob.", "I love jazz."),
    "cleo": ("My name is Cleo.", "I work as a baker."),
}


async def _human(runs: Runs, agent_id: str) -> str:
    block = json_object(await runs.client.get(f"/v1/agents/{agent_id}/core-memory/blocks/human"))
    return str(block["value"])


async def _turn(runs: Runs, said: dict[str, str]) -> None:
    """One batch run in which every main agent hears its user's words."""
    run = await runs.start([{"agent_id": agent_id, "input": text} for agent_id, text in said.items()])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done


async def test_one_sleeptime_run_keeps_each_users_facts_in_its_own_agents_human_block(
    runs: Runs, emulator: str
) -> None:
    mains: dict[str, dict[str, Any]] = {name: await runs.agent(name, enable_sleeptime=True) for name in USERS}
    for turn in range(2):
        await _turn(runs, {mains[name]["id"]: lines[turn] for name, lines in USERS.items()})
    for main in mains.values():
        assert await _human(runs, main["id"]) == "Nothing known yet."  # the main agents kept nothing

    (run,) = json_list(await runs.client.post("/v1/sleeptime/run", json={"all": True}))
    assert run["kind"] == "sleeptime"
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == len(USERS)
    # Each sleep-time agent inserted, then finished its edits: two steps, each one provider batch.
    assert [b["step_number"] for b in done["progress"]["provider_batches"]] == [0, 1]
    stepped = (await runs.client.get(f"/v1/messages/batches/{run['id']}/agents")).json()["agents"]
    assert sorted(a["agent_name"] for a in stepped) == sorted(f"{name}-sleeptime" for name in USERS)

    humans = {name: await _human(runs, main["id"]) for name, main in mains.items()}
    assert humans["ada"] == "Nothing known yet.\nThe user's name is Ada\nThe user lives in Lyon"
    assert humans["bob"] == "Nothing known yet.\nThe user's name is Bob\nThe user loves jazz"
    assert humans["cleo"] == "Nothing known yet.\nThe user's name is Cleo\nThe user works as a baker"
    # Nothing new since: asking again queues no run.
    assert json_list(await runs.client.post("/v1/sleeptime/run", json={"all": True})) == []
