"""A step's agents go into provider batches by size as well as by count (``NIGHTSHIFT_BATCH_BYTES``).

The limit is lowered here so that a handful of agents is over it; at its default, the provider's
own limit, a batch holds 10,000 agents' requests of a few thousand tokens.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from integration.batch.kit import by_agent, call, say
from nightshift.domain.batch_split import BYTES_PER_TOKEN
from nightshift.emulator import EmulatorAdmin
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL, Runs

# A new agent's request is about 1,500 tokens (12,500 bytes of estimate, 8,300 of body): two
# agents fit under this, three do not.
BATCH_BYTES = 30_000
AGENTS = 5


def _body_bytes(request: dict[str, Any]) -> int:
    """The size of a request the emulator logged: an uploaded file's, or a JSON body's as sent."""
    body = request["body"]
    if "bytes" in body:  # OpenAI: the input file, as the emulator stored it
        return int(body["bytes"])
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


@pytest.mark.settings(batch_bytes=BATCH_BYTES)
@pytest.mark.parametrize("model", [ANTHROPIC_MODEL, OPENAI_MODEL])
async def test_a_step_over_the_byte_limit_goes_out_as_several_provider_batches(
    runs: Runs, admin: EmulatorAdmin, model: str
) -> None:
    agents = [await runs.agent(f"sized-{i}", model=model) for i in range(AGENTS)]
    for agent in agents:
        await admin.script(
            agent["id"],
            call("core_memory_append", heartbeat=True, label="human", content=f"likes {agent['name']}"),
            say(f"noted, {agent['name']}"),
        )
    run = await runs.start([{"agent_id": a["id"], "input": "please remember me"} for a in agents])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": AGENTS, "failed": 0, "cancelled": 0}

    # Both steps were cut by size (the count limit is 10,000), each batch applied on its own.
    batches = done["progress"]["provider_batches"]
    for step in (0, 1):
        sizes = [sum(b["request_counts"].values()) for b in batches if b["step_number"] == step]
        assert len(sizes) > 1 and sum(sizes) == AGENTS, batches
        assert all(b["status"] == "applied" for b in batches if b["step_number"] == step)
    assert len({b["provider_batch_id"] for b in batches}) == len(batches)

    # Every agent's result was applied: the memory edit, then the next step's answer.
    assert by_agent(await runs.messages(run["id"])) == {
        a["id"]: ["user", "assistant", "tool", "user", "assistant", "tool"] for a in agents
    }
    for agent in agents:
        human = (await runs.client.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")).json()
        assert human["value"].endswith(f"likes {agent['name']}")

    # The estimate errs high: every body the provider got is under the limit set on it.
    created = "/v1/files" if model == OPENAI_MODEL else "/v1/messages/batches"
    uploads = await admin.requests(path=created, method="POST")
    assert len(uploads) == len(batches)
    assert all(0 < _body_bytes(u) <= BATCH_BYTES for u in uploads), [_body_bytes(u) for u in uploads]


@pytest.mark.settings(batch_bytes=BATCH_BYTES)
async def test_an_agent_over_the_byte_limit_alone_still_goes(runs: Runs, admin: EmulatorAdmin) -> None:
    big = await runs.agent(
        "big", memory_blocks=[{"label": "human", "value": "x" * (BATCH_BYTES // BYTES_PER_TOKEN * 4), "limit": 100_000}]
    )
    small = await runs.agent("small")
    for agent in (big, small):
        await admin.script(agent["id"], say("hello"))
    run = await runs.start([{"agent_id": a["id"], "input": "hi"} for a in (big, small)])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 2
    assert sorted(sum(b["request_counts"].values()) for b in done["progress"]["provider_batches"]) == [1, 1]
