"""POST /v1/agents/{id}/messages: the batch step logic, one model call at a time through the normal API."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from integration.batch.kit import call, conversation, say, tool_names
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedError, ScriptedReply
from support.api import create_tool
from support.runs import LOOKUP_TOOL, Runs


async def _normal_calls(admin: EmulatorAdmin) -> list[dict[str, Any]]:
    return [c["body"] for c in await admin.model_calls() if c["custom_id"] is None]


async def test_sync_step_runs_a_tool_then_answers(runs: Runs, admin: EmulatorAdmin) -> None:
    await create_tool(runs.client, LOOKUP_TOOL)
    agent = await runs.agent("sync", tools=["lookup_order"])
    await admin.script("*", call("lookup_order", heartbeat=True, order_id="A1"), say("Your order A1 shipped."))
    response = await runs.client.post(
        f"/v1/agents/{agent['id']}/messages", json={"messages": [{"role": "user", "content": "where is A1?"}]}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["stop_reason"] == {"message_type": "stop_reason", "stop_reason": "end_turn"}
    usage = body["usage"]
    assert usage["message_type"] == "usage_statistics"
    assert usage["step_count"] == 2
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    # Only what the run wrote after the input: not the input, not the heartbeat between the steps.
    kinds = [m["message_type"] for m in body["messages"]]
    assert kinds == [
        "reasoning_message",
        "tool_call_message",
        "tool_return_message",
        "reasoning_message",
        "assistant_message",
        "tool_return_message",
    ]
    messages = body["messages"]
    assert messages[1]["tool_call"]["name"] == "lookup_order"
    assert json.loads(messages[2]["tool_return"])["message"] == "order A1 shipped"
    assert messages[2]["status"] == "success"
    assert messages[4]["content"] == "Your order A1 shipped."
    assert all(m["agent_id"] == agent["id"] and m["batch_item_id"] is None for m in messages)
    # One run, two steps: the tool call and its return in the first, the answer in the second.
    assert len({m["run_id"] for m in messages}) == 1 and messages[0]["run_id"].startswith("run-")
    assert messages[0]["step_id"] == messages[2]["step_id"] != messages[3]["step_id"] == messages[4]["step_id"]
    assert len({m["otid"] for m in messages}) == len(messages)

    first, second = await _normal_calls(admin)
    assert "lookup_order" in tool_names(first)
    seen = "\n".join(conversation(second))
    assert "where is A1?" in seen and "order A1 shipped" in seen

    # Everything it returned is stored, in the same order, after the input and around the heartbeat.
    stored = (await runs.context(agent["id"]))[-8:]
    assert stored[0]["content"] == "where is A1?" and json.loads(stored[4]["content"])["type"] == "heartbeat"
    assert [(m["id"], m["message_type"]) for m in stored if m["message_type"] != "user_message"] == [
        (m["id"], m["message_type"]) for m in messages
    ]
    assert stored[0]["run_id"] == stored[4]["run_id"] == messages[0]["run_id"]


async def test_sync_step_reports_tool_errors_and_limits(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("sync-errors")
    await admin.script("*", call("teleport", heartbeat=False), say("I cannot do that."))
    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "go to Mars"})
    assert response.status_code == 200, response.text
    body = response.json()
    returns = [m for m in body["messages"] if m["message_type"] == "tool_return_message"]
    assert returns[0]["status"] == "error"
    assert "unknown tool 'teleport'" in returns[0]["tool_return"]
    assert body["usage"]["step_count"] == 2

    await admin.script("*", *[call("conversation_search", heartbeat=True, query="q") for _ in range(5)])
    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "loop", "max_steps": 2})
    assert response.status_code == 200, response.text
    assert response.json()["stop_reason"]["stop_reason"] == "max_steps"
    assert response.json()["usage"]["step_count"] == 2


async def test_sync_step_refused_while_in_a_batch_step(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("busy")
    await admin.configure(polls_to_end=1000)
    run = await runs.start([{"agent_id": agent["id"], "input": "batch"}])
    before = await runs.context(agent["id"])
    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "now please"})
    assert response.status_code == 409, response.text
    assert agent["id"] in response.json()["detail"]
    assert await runs.context(agent["id"]) == before
    assert await _normal_calls(admin) == []
    await runs.client.patch(f"/v1/messages/batches/{run['id']}/cancel")
    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "now please"})
    assert response.status_code == 200, response.text


async def test_sync_step_bad_requests(runs: Runs) -> None:
    response = await runs.client.post("/v1/agents/agent-nope/messages", json={"input": "hi"})
    assert response.status_code == 404, response.text
    assert "agent-nope" in response.json()["detail"]
    agent = await runs.agent("quiet")
    before = await runs.context(agent["id"])
    bodies: list[dict[str, Any]] = [
        {},
        {"messages": []},
        {"input": "  "},
        {"messages": [{"role": "user", "content": ""}]},
    ]
    for body in bodies:
        response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["detail"]
    assert await runs.context(agent["id"]) == before


async def test_sync_step_provider_error(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("unlucky")
    await admin.script("*", ScriptedReply(error=ScriptedError(type="invalid_request_error", message="prompt too odd")))
    response = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hello"})
    assert response.status_code == 502, response.text
    assert "prompt too odd" in response.json()["detail"]
    # What was written before the model call stays written: the user's message.
    assert (await runs.context(agent["id"]))[-1]["content"] == "hello"


# The tool runs in the sandbox, a real process: its sleep keeps the step open (no clock of the
# server's can) while the test sends the requests that the hold must refuse.
PAUSING_TOOL = '''
def pause_a_moment(order_id: str) -> str:
    """Look up an order, taking a moment.

    Args:
        order_id: The order's identifier.
    """
    import time

    time.sleep(1.5)
    return f"order {order_id}: packed"
'''


async def test_a_sync_step_holds_its_agent(runs: Runs, admin: EmulatorAdmin) -> None:
    await create_tool(runs.client, PAUSING_TOOL)
    agent = await runs.agent("held", tools=["pause_a_moment"])
    await admin.script("*", call("pause_a_moment", heartbeat=True, order_id="A1"), say("Packed."))
    stepping = asyncio.create_task(
        runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "how is A1 doing?"})
    )
    # The input and the hold are written in one transaction: once the input shows, the agent is held.
    deadline = asyncio.get_running_loop().time() + 10
    while not any(m.get("content") == "how is A1 doing?" for m in await runs.context(agent["id"])):
        assert asyncio.get_running_loop().time() < deadline and not stepping.done()
        await asyncio.sleep(0.02)  # waits for the request's task to write the input, not for time to pass

    batch = await runs.client.post(
        "/v1/messages/batches", json={"requests": [{"agent_id": agent["id"], "input": "hi"}]}
    )
    assert batch.status_code == 409, batch.text
    assert "synchronously" in batch.json()["detail"]
    again = await runs.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "and now?"})
    assert again.status_code == 409
    assert (await runs.client.get("/v1/messages/batches")).json() == []

    finished = await stepping
    assert finished.status_code == 200, finished.text
    # Released: the agent takes part in a batch run again.
    await admin.script("*")
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    assert (await runs.wait(run["id"]))["status"] == "completed"
