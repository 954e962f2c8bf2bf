"""Sleep-time agents through letta-client 1.12.1 against a real server and the emulator: made with
``enable_sleeptime``, due after the main agent's synchronous turns, stepped in a batch run of their
own (``POST /v1/sleeptime/run``: 1.12.1 has no call for it), and gone with their main agent."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

MODEL = "anthropic/claude-3-5-haiku-20241022"
RUN_TIMEOUT = 60.0  # a deadline only


@pytest.fixture(scope="module")
def server_options() -> dict[str, Any]:
    return {"sleeptime_interval_seconds": 3600.0}  # gathered when the test says, not by the poller


def _wait(http: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        run: dict[str, Any] = http.get(f"/v1/messages/batches/{run_id}").json()
        if run["status"] not in ("created", "running"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def test_sleeptime_agents_keep_the_memory_of_agents_talked_to_synchronously(
    letta_1_12: Any, http: httpx.Client
) -> None:
    facts = {"ada": "My name is Ada.", "bo": "I live in Oslo."}
    mains = {}
    for name in facts:
        agent = letta_1_12.agents.create(
            name=name,
            model=MODEL,
            memory_blocks=[{"label": "human", "value": ""}, {"label": "persona", "value": "A helper."}],
            enable_sleeptime=True,
        )
        assert agent.enable_sleeptime
        group = agent.managed_group
        assert group.manager_type == "sleeptime" and group.manager_agent_id == agent.id
        (sleeper_id,) = group.agent_ids
        assert letta_1_12.agents.retrieve(sleeper_id).agent_type == "sleeptime_agent"
        changed = http.patch(
            f"/v1/groups/{group.id}",
            json={"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 1}},
        )
        assert changed.status_code == 200, changed.text
        mains[name] = (agent.id, sleeper_id)

    assert http.post("/v1/sleeptime/run", json={}).json() == []  # no turn yet: nothing due
    for name, (agent_id, _) in mains.items():
        reply = letta_1_12.agents.messages.create(agent_id, messages=[{"role": "user", "content": facts[name]}])
        assert reply.stop_reason is not None
    (run,) = http.post("/v1/sleeptime/run", json={}).json()
    assert run["kind"] == "sleeptime"
    done = _wait(http, run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == len(mains), done

    for name, (agent_id, _) in mains.items():
        human = letta_1_12.agents.blocks.retrieve("human", agent_id=agent_id)
        assert facts[name].rstrip(".").split()[-1] in human.value, human.value
        other = next(n for n in facts if n != name)
        assert facts[other].rstrip(".").split()[-1] not in human.value, human.value

    agent_id, sleeper_id = mains["ada"]
    letta_1_12.agents.delete(agent_id)
    with pytest.raises(Exception) as gone:
        letta_1_12.agents.retrieve(sleeper_id)
    assert getattr(gone.value, "status_code", None) == 404
