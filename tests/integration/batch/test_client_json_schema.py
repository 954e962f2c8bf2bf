"""A tool created with the client's own json_schema goes through a batch run like any other."""

from __future__ import annotations

import json

import pytest

from integration.batch.kit import by_agent, call, calls_of, say, text_of
from nightshift.emulator import EmulatorAdmin
from support.runs import LOOKUP_TOOL, OPENAI_MODEL, Runs

CLIENT_SCHEMA = {
    "name": "lookup_order",
    "description": "Find an order by its number (the client's description).",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "The order number.", "pattern": "^[0-9]+$"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("model", [None, OPENAI_MODEL], ids=["anthropic", "openai"])
async def test_a_tool_with_a_client_schema_runs_in_a_batch(runs: Runs, admin: EmulatorAdmin, model: str | None) -> None:
    created = await runs.client.post("/v1/tools/", json={"source_code": LOOKUP_TOOL, "json_schema": CLIENT_SCHEMA})
    assert created.status_code == 200, created.text
    agent = await runs.agent("clerk", tools=["lookup_order"], **({"model": model} if model else {}))
    await admin.script(agent["id"], call("lookup_order", heartbeat=True, order_id="42"), say("it shipped"))

    run = await runs.start([{"agent_id": agent["id"], "input": "where is order 42?"}])
    done = await runs.wait(run["id"])

    assert done["status"] == "completed", done
    messages = await runs.messages(run["id"])
    assert by_agent(messages)[agent["id"]] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    result = json.loads(text_of(next(m for m in messages if m["role"] == "tool")))
    assert "order 42 shipped" in result["message"]
    # The model was offered the client's schema, with the agent arguments added.
    first, _ = await calls_of(admin, agent["id"])
    offered = next(t for t in first["tools"] if (t.get("name") or t["function"]["name"]) == "lookup_order")
    parameters = offered.get("input_schema") or offered["function"]["parameters"]
    assert parameters["properties"]["order_id"]["pattern"] == "^[0-9]+$"
    assert set(parameters["required"]) == {"inner_thoughts", "order_id", "request_heartbeat"}
