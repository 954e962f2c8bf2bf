"""Whatever goes wrong with one agent fails that agent alone, with the reason on the run.

Its input, its tools, its result, its row: the rest of the step goes on, and no provider batch
is retried forever on an error that will not go away.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from sqlalchemy import update

from integration.batch.kit import call, say, text_of
from nightshift.batch.worker import MAX_FAILURES
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import HttpFault
from nightshift.store.db import opened
from nightshift.store.tables import tools
from support.api import create_tool
from support.runs import OPENAI_MODEL, Runs
from support.stepped import SteppedRuns

ECHO = '''
def echo(word: str) -> str:
    """Say a word back, with what a database cannot hold.

    Args:
        word: The word.
    """
    return word + "\\x00 and a NUL from the tool"
'''

# Refusals made before anything is read or written: one database is enough.
ONE_DATABASE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


async def test_nul_characters_from_the_model_and_tools_are_stored(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, ECHO)
    agent = await stepped.agent("nul", tools=["echo"])
    stepped.model.script(
        agent["id"],
        call("echo", heartbeat=True, word="a\u0000b", inner_thoughts="thinking\u0000hard"),
        say("done\u0000!"),
    )
    run = await stepped.start([{"agent_id": agent["id"], "input": "echo something"}])

    done = await stepped.finish(run["id"])

    assert done["status"] == "completed", done
    messages = await stepped.messages(run["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    # Arguments and tool results are JSON text, where a NUL is an escape: kept as they were.
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])["word"] == "a\x00b"
    assert json.loads(text_of(messages[2]))["message"] == "a\x00b\x00 and a NUL from the tool"
    assert json.loads(messages[4]["tool_calls"][0]["function"]["arguments"])["message"] == "done\x00!"
    # Plain text cannot hold it on PostgreSQL: the reasoning is stored with U+FFFD in its place
    # (and the raw reply, in a JSON column, likewise), on both databases alike.
    stored = await stepped.context(agent["id"])
    assert [m["reasoning"] for m in stored if m["message_type"] == "reasoning_message"][-2] == "thinking\ufffdhard"


async def test_a_tool_with_an_unusable_schema_fails_its_agent_alone(stepped: SteppedRuns, db_url: str) -> None:
    broken = await create_tool(stepped.client, ECHO)
    # Stored before the API checked schemas (or changed in the database): it cannot be offered.
    async with opened(db_url) as engine:
        async with engine.begin() as conn:
            await conn.execute(
                update(tools).where(tools.c.id == broken["id"]).values(json_schema={"parameters": "x", "name": 5})
            )
    bad = await stepped.agent("bad", tool_ids=[broken["id"]])
    good = await stepped.agent("good")
    stepped.model.script(good["id"], say("all fine"))
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in (bad, good)])

    done = await stepped.finish(run["id"])

    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 1, "cancelled": 0}
    (failure,) = done["progress"]["failures"]
    assert failure["agent_id"] == bad["id"]
    assert failure["error"] == (
        "the request could not be built: its tool 'echo' cannot be offered to the model: "
        "its name 5 is not 1-64 letters, digits, '_' or '-'"
    )
    # Only the healthy agent went to the provider.
    (batch,) = done["progress"]["provider_batches"]
    assert batch["request_counts"]["succeeded"] == 1 and sum(batch["request_counts"].values()) == 1


@ONE_DATABASE
async def test_one_agent_many_times_is_refused_at_once(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("popular")

    response = await stepped.client.post(
        "/v1/messages/batches", json={"requests": [{"agent_id": agent["id"], "input": "hi"}] * 20_000}
    )

    assert response.status_code == 422
    assert response.json()["detail"] == f"an agent may appear once per run; repeated: {agent['id']}"


@ONE_DATABASE
async def test_twenty_thousand_requests_naming_the_same_agents_are_refused_before_each_is_read(
    stepped: SteppedRuns,
) -> None:
    agents = sorted([(await stepped.agent(f"popular-{n}"))["id"] for n in range(4)])
    lines = [
        {"role": "user", "content": [{"type": "text", "text": f"Where is my order A-{k}? It is late."}]}
        for k in range(3)
    ]
    body: dict[str, Any] = {"requests": [{"agent_id": agents[n % 4], "messages": lines} for n in range(20_000)]}
    # The last request is malformed: reading the 20,000 requests one by one (over a second of CPU
    # here) would refuse it. The repeated ids are found in the parsed body first, a small part of
    # that work, so the refusal names them and not the last request.
    body["requests"][-1]["messages"] = [{"role": "robot", "content": "?"}]
    response = await stepped.client.post("/v1/messages/batches", json=body)

    assert response.status_code == 422, response.text
    assert response.json() == {
        "detail": f"an agent may appear once per run; repeated: {', '.join(agents)}",
        "field": "requests",
    }
    listed = await stepped.client.get("/v1/messages/batches")
    assert listed.json() == []  # nothing was written
    # A repeated id that is no id at all is left to the validation of each request.
    wrong = await stepped.client.post("/v1/messages/batches", json={"requests": [{"agent_id": 7, "input": "hi"}] * 2})
    assert wrong.status_code == 422, wrong.text
    assert wrong.json()["field"] == "requests.0.agent_id"


@pytest.mark.settings(error_backoff_seconds=0.01)
async def test_a_stage_that_keeps_failing_is_given_up(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("stuck", model=OPENAI_MODEL)
    other = await runs.agent("fine")
    await admin.script(other["id"], say("all fine"))
    # The provider answers every read of the result file with 404, which will not go away.
    await admin.fault(HttpFault(path="/v1/files/*", method="GET", status=404, count=50, should_retry=False))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (agent, other)])

    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 1, "cancelled": 0}
    (failure,) = done["progress"]["failures"]
    assert failure["agent_id"] == agent["id"]
    assert failure["error"].startswith(f"gave up after {MAX_FAILURES} failures in a row: OpenAI returned 404")
    openai_batch = next(b for b in done["progress"]["provider_batches"] if b["provider"] == "openai")
    assert openai_batch["error"] == failure["error"]


async def test_a_batch_the_provider_cancelled_lists_its_agents_and_why(
    runs: Runs, admin: EmulatorAdmin, emulator: str
) -> None:
    agents = [await runs.agent(f"cut-{i}") for i in range(2)]
    await admin.configure(polls_to_end=1000)
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    provider_batch_id = run["progress"]["provider_batches"][0]["provider_batch_id"]

    # Someone cancels it at the provider (in Anthropic's console, say).
    async with anthropic.AsyncAnthropic(base_url=emulator, api_key="sk-ant-test") as client:
        await client.messages.batches.cancel(provider_batch_id)
    done = await runs.wait(run["id"])

    assert done["status"] == "failed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 0, "failed": 2, "cancelled": 0}
    failures = done["progress"]["failures"]
    assert sorted(f["agent_id"] for f in failures) == sorted(a["id"] for a in agents)
    for failure in failures:
        assert failure["request_status"] == "cancelled"
        assert failure["error"] == "the provider batch canceled before this request ran"
