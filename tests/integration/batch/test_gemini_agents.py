"""Agents on a Gemini model, through the emulator's Gemini API (which refuses what the real one refuses).

A batch step inline and through an uploaded JSONL file, a synchronous and a streamed step, a
request the provider fails alone, an expired batch and a cancelled one: each as for the other
providers, through ``google-genai`` against the emulator.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from integration.batch.kit import call, say, wait_for
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedError, ScriptedReply
from nightshift.providers.google_ai.wire import UNSIGNED
from support.api import json_object
from support.runs import GEMINI_MODEL, Runs

CREATE = "/v1beta/models/gemini-2.5-flash:batchGenerateContent"


async def creates(admin: EmulatorAdmin) -> list[dict[str, Any]]:
    return await admin.requests(path=CREATE, method="POST")


async def likes_tea(runs: Runs, admin: EmulatorAdmin, name: str, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An agent of ``model`` told "I like tea." in a run, which it stores, then answers: the agent
    and the run, completed."""
    agent = await runs.agent(name, model=model)
    await admin.script(
        agent["id"],
        call("core_memory_append", heartbeat=True, label="human", content="Likes tea."),
        say("Noted: you like tea."),
    )
    run = await runs.start([{"agent_id": agent["id"], "input": "I like tea."}])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    return agent, done


async def test_a_gemini_agent_steps_in_a_batch_run_with_its_tool_results_sent_back(
    runs: Runs, admin: EmulatorAdmin
) -> None:
    agent, done = await likes_tea(runs, admin, "gem", GEMINI_MODEL)
    assert [b["provider"] for b in done["progress"]["provider_batches"]] == ["google_ai", "google_ai"]
    assert done["progress"]["cost_usd"] > 0
    roles = [m["role"] for m in await runs.messages(done["id"])]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "tool"]
    first, second = await admin.model_calls(api="gemini", custom_id=agent["id"])
    assert "I am gem." in first["body"]["systemInstruction"]["parts"][0]["text"]  # its memory, in the system prompt
    # The second step shows the first step's call and answers it with its result, first in the user turn.
    contents = second["body"]["contents"]
    model_turn = next(c for c in reversed(contents) if c["role"] == "model")
    assert model_turn["parts"][-1]["functionCall"]["name"] == "core_memory_append"
    answer = contents[contents.index(model_turn) + 1]
    assert answer["parts"][0]["functionResponse"]["name"] == "core_memory_append"
    assert len(await creates(admin)) == 2
    blocks = (await runs.client.get(f"/v1/agents/{agent['id']}/core-memory/blocks")).json()
    assert "Likes tea." in next(b for b in blocks if b["label"] == "human")["value"]


async def test_a_gemini_3_agent_sends_its_calls_back_with_their_thought_signatures(
    runs: Runs, admin: EmulatorAdmin
) -> None:
    # Gemini 3 refuses a call sent back without its signature (the emulator too): the signature
    # the first step's answer carried must come back, from the store, in the second step.
    agent, done = await likes_tea(runs, admin, "signed", "google_ai/gemini-3-flash-preview")
    assert done["progress"]["agents"]["finished"] == 1
    _, second = await admin.model_calls(api="gemini", custom_id=agent["id"])
    model_turn = next(c for c in reversed(second["body"]["contents"]) if c["role"] == "model")
    call_part = model_turn["parts"][-1]
    assert call_part["functionCall"]["name"] == "core_memory_append"
    assert call_part["thoughtSignature"] not in (None, "", UNSIGNED)


async def test_a_batch_over_the_inline_limit_goes_as_an_uploaded_jsonl_file(
    runs: Runs, admin: EmulatorAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read when the server first builds its Gemini client (this test's first Gemini call).
    monkeypatch.setenv("NIGHTSHIFT_GEMINI_INLINE_BYTES", "1000")
    agents = [await runs.agent(f"filed-{i}", model=GEMINI_MODEL) for i in range(3)]
    run = await runs.start([{"agent_id": a["id"], "input": f"hello from {i}"} for i, a in enumerate(agents)])
    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 3
    (create,) = await creates(admin)
    assert create["body"]["batch"]["inputConfig"] == {"fileName": create_file(create)}
    uploads = [r for r in await admin.requests(method="POST") if r["path"].startswith("/upload/v1beta/files")]
    assert uploads, "the requests were not uploaded as a file"
    said = {m["agent_id"] for m in await runs.messages(run["id"]) if m["role"] == "assistant"}
    assert said == {a["id"] for a in agents}


def create_file(create: dict[str, Any]) -> str:
    name: str = create["body"]["batch"]["inputConfig"]["fileName"]
    assert name.startswith("files/")
    return name


async def test_a_gemini_agent_steps_synchronously_and_streams(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("direct", model=GEMINI_MODEL)
    await admin.script("*", say("Hello right away."), say("Hello right away."))
    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hello"})

    assert response.status_code == 200, response.text
    said = [m["content"] for m in response.json()["messages"] if m["message_type"] == "assistant_message"]
    assert said == ["Hello right away."]
    async with runs.client.stream(
        "POST", f"/v1/agents/{agent['id']}/messages/stream", json={"input": "again", "stream_tokens": True}
    ) as streamed:
        assert streamed.status_code == 200
        text = "".join([chunk async for chunk in streamed.aiter_text()])
    assert "Hello right away." in text and "[DONE]" in text
    assert len([c for c in await admin.model_calls(api="gemini") if c["batch_id"] is None]) == 2


async def test_a_request_gemini_fails_fails_its_agent_alone(runs: Runs, admin: EmulatorAdmin) -> None:
    agents = [await runs.agent(f"some-{i}", model=GEMINI_MODEL) for i in range(3)]
    bad = ScriptedError(type="invalid_request_error", message="contents are not valid")
    await admin.script(agents[0]["id"], ScriptedReply(error=bad))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    done = await runs.wait(run["id"])

    assert done["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 1, "cancelled": 0}, done
    (failure,) = done["progress"]["failures"]
    assert failure["agent_id"] == agents[0]["id"]
    assert "contents are not valid" in failure["error"]


async def test_an_expired_gemini_batch_stops_its_agents_with_the_reason(runs: Runs, admin: EmulatorAdmin) -> None:
    agents = [await runs.agent(f"late{i}", model=GEMINI_MODEL) for i in range(2)]
    await admin.configure(polls_to_end=5, expire_after_polls=1)
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    done = await runs.wait(run["id"])

    assert done["status"] == "failed", done
    (batch,) = done["progress"]["provider_batches"]
    assert batch["provider_status"] == "expired"
    failures = done["progress"]["failures"]
    assert sorted(f["agent_id"] for f in failures) == sorted(a["id"] for a in agents)
    assert all(f["request_status"] == "expired" for f in failures), failures


async def test_cancelling_a_run_cancels_its_gemini_batch(runs: Runs, admin: EmulatorAdmin, app: FastAPI) -> None:
    agents = [await runs.agent(f"c{i}", model=GEMINI_MODEL) for i in range(2)]
    await admin.configure(polls_to_end=1000)
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    (batch,) = run["progress"]["provider_batches"]

    async def polled() -> bool:
        found = json_object(await runs.client.get(f"/v1/messages/batches/{run['id']}"))
        return found["progress"]["provider_batches"][0]["provider_status"] in ("pending", "running")

    await wait_for(polled)
    cancelled = json_object(await runs.client.patch(f"/v1/messages/batches/{run['id']}/cancel"))

    assert cancelled["status"] == "cancelled"
    assert cancelled["progress"]["agents"]["cancelled"] == 2
    seen = await admin.requests(path=f"/v1beta/{batch['provider_batch_id']}:cancel", method="POST")
    assert len(seen) == 1
