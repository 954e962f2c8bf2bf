"""A step's agents go into provider batches by size as well as by count (``NIGHTSHIFT_BATCH_BYTES``).

The limit is lowered here so that a handful of agents is over it; at its default, the provider's
own limit, a batch holds 10,000 agents' requests of a few thousand tokens.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from integration.batch.kit import by_agent, call, say
from integration.batch.test_run_summaries import check
from nightshift.domain.batch_split import BYTES_PER_TOKEN
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import HttpFault
from nightshift.store.db import opened
from support.clock import ManualClock
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


# An image of 67,500 bytes: 90,000 characters of base64, sent with every request of its agent,
# which the provider counts as about 1,600 tokens (12,800 bytes of estimate).
IMAGE = base64.b64encode(bytes(i % 256 for i in range(67_500))).decode()
# A step of five agents with that image in their windows is one batch by the estimate (about
# 37,000 bytes each), but about 98,000 bytes each in truth: two to a part, three parts.
IMAGE_BATCH_BYTES = 210_000
IMAGE_PARTS = 3


async def _agents_with_an_image(runs: Runs, admin: EmulatorAdmin, model: str) -> list[dict[str, Any]]:
    """Agents that were shown ``IMAGE`` in a run of their own (cut by the estimate, which counts a
    new image's bytes), so that it is in their windows."""
    agents = [await runs.agent(f"seeing-{i}", model=model) for i in range(AGENTS)]
    for agent in agents:
        await admin.script(agent["id"], say("a pattern"), say("still a pattern"))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE}}
    content = [{"type": "text", "text": "what is this?"}, image]
    run = await runs.start([{"agent_id": a["id"], "messages": [{"role": "user", "content": content}]} for a in agents])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    return agents


async def _sent_per_agent(admin: EmulatorAdmin, agents: list[dict[str, Any]]) -> dict[str, int]:
    return {a["name"]: len(await admin.model_calls(custom_id=a["id"])) for a in agents}


@pytest.mark.settings(batch_bytes=IMAGE_BATCH_BYTES)
@pytest.mark.parametrize("model", [ANTHROPIC_MODEL, OPENAI_MODEL])
async def test_a_batch_over_the_limit_once_built_is_cut_by_real_size_and_every_agent_goes_on(
    runs: Runs, admin: EmulatorAdmin, model: str
) -> None:
    agents = await _agents_with_an_image(runs, admin, model)
    created = "/v1/files" if model == OPENAI_MODEL else "/v1/messages/batches"
    before = len(await admin.requests(path=created, method="POST"))

    run = await runs.start([{"agent_id": a["id"], "input": "and now?"} for a in agents])
    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": AGENTS, "failed": 0, "cancelled": 0}
    # The estimate put the step in one batch; submission cut it into parts that fit, each sent once.
    batches = done["progress"]["provider_batches"]
    assert len(batches) == IMAGE_PARTS and {b["step_number"] for b in batches} == {0}, batches
    assert sum(sum(b["request_counts"].values()) for b in batches) == AGENTS
    assert all(b["status"] == "applied" and b["provider_batch_id"] for b in batches), batches
    assert len({b["provider_batch_id"] for b in batches}) == len(batches)
    uploads = (await admin.requests(path=created, method="POST"))[before:]
    assert len(uploads) == len(batches)
    assert all(0 < _body_bytes(u) <= IMAGE_BATCH_BYTES for u in uploads), [_body_bytes(u) for u in uploads]
    assert sum(_body_bytes(u) for u in uploads) > IMAGE_BATCH_BYTES
    assert await _sent_per_agent(admin, agents) == {a["name"]: 2 for a in agents}  # the first run's, and this one
    assert by_agent(await runs.messages(run["id"])) == {a["id"]: ["user", "assistant", "tool"] for a in agents}


@pytest.mark.settings(batch_bytes=IMAGE_BATCH_BYTES, error_backoff_seconds=600)
@pytest.mark.parametrize("model", [ANTHROPIC_MODEL, OPENAI_MODEL])
async def test_parts_not_sent_when_they_were_cut_are_sent_later_and_once(
    runs: Runs, admin: EmulatorAdmin, db_url: str, model: str, clock: ManualClock
) -> None:
    agents = await _agents_with_an_image(runs, admin, model)
    # Every part's sending fails once the batch is cut (as a crash then would leave them): written,
    # nothing sent.
    created = "/v1/files" if model == OPENAI_MODEL else "/v1/messages/batches"
    await admin.fault(HttpFault(path=created, method="POST", status=500, should_retry=False, count=IMAGE_PARTS))
    run = await runs.start([{"agent_id": a["id"], "input": "and now?"} for a in agents])
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        batches = (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()["progress"]["provider_batches"]
        if len(batches) == IMAGE_PARTS and all(b["error"] for b in batches):
            break
        assert asyncio.get_running_loop().time() < deadline, batches
        await asyncio.sleep(0.05)  # waits for the app's poller to try every part, not for time to pass
    assert all(b["status"] == "created" and b["provider_batch_id"] is None for b in batches), batches
    assert await _sent_per_agent(admin, agents) == {a["name"]: 1 for a in agents}  # the first run's only
    # Each part's summary counts its own items: those the cut moved out of the first are in theirs.
    async with opened(db_url) as engine:
        await check(engine, run["id"])

    clock.advance(600)  # the retry delay passes
    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": AGENTS, "failed": 0, "cancelled": 0}
    batches = done["progress"]["provider_batches"]
    assert len(batches) == IMAGE_PARTS and len({b["provider_batch_id"] for b in batches}) == IMAGE_PARTS, batches
    assert await _sent_per_agent(admin, agents) == {a["name"]: 2 for a in agents}
