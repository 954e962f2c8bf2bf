"""Approvals and client-side tools in batch runs stepped pass by pass, over the scripted provider:
an agent that stops for approval leaves the run, which goes on without it; a later run's answer
puts the results in front of the model."""

from __future__ import annotations

from typing import Any

from integration.batch.kit import call, conversation, say, tool_names
from support.api import json_object
from support.stepped import SteppedRuns

GATED = [{"type": "requires_approval", "tool_name": "core_memory_append"}]
CLIPBOARD = {
    "name": "read_clipboard",
    "description": "Read the clipboard.",
    "parameters": {"type": "object", "properties": {"what": {"type": "string"}}},
}


async def _last(stepped: SteppedRuns, agent_id: str) -> dict[str, Any]:
    listed = await stepped.client.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 100})
    assert listed.status_code == 200, listed.text
    return dict(listed.json()[-1])


async def test_the_run_goes_on_without_the_agent_awaiting_approval(stepped: SteppedRuns) -> None:
    gated = await stepped.agent("gated", tool_rules=GATED)
    free = await stepped.agent("free", tool_rules=GATED)
    clienty = await stepped.agent("clienty")
    remember = call("core_memory_append", heartbeat=True, label="human", content="Likes tea.")
    stepped.model.script(gated["id"], remember, say("saved"))
    stepped.model.script(free["id"], call("conversation_search", heartbeat=True, query="tea"), say("found"), say("x"))
    stepped.model.script(clienty["id"], call("read_clipboard", heartbeat=True, what="list"), say("milk it is"))
    requests = [
        {"agent_id": gated["id"], "input": "remember I like tea"},
        {"agent_id": free["id"], "input": "what do I like?"},
        {"agent_id": clienty["id"], "input": "what is on my list?", "client_tools": [CLIPBOARD]},
    ]
    run = await stepped.start(requests)
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    agents = done["progress"]["agents"]
    assert (agents["awaiting_approval"], agents["finished"]) == (2, 1), done["progress"]
    # The run did not wait: the parked agents were asked once, the other twice.
    assert [len(stepped.model.calls(a["id"])) for a in (gated, free, clienty)] == [1, 2, 1]
    (offered,) = stepped.model.calls(clienty["id"])
    assert "read_clipboard" in tool_names(offered)
    listed = await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents")
    assert listed.status_code == 200, listed.text
    states = {a["agent_id"]: a["state"] for a in listed.json()["agents"]}
    assert states == {gated["id"]: "needs_approval", free["id"]: "finished", clienty["id"]: "needs_approval"}
    pending = {a["id"]: await _last(stepped, a["id"]) for a in (gated, clienty)}
    assert {p["message_type"] for p in pending.values()} == {"approval_request_message"}
    # Anything but an answer for an agent that awaits one is refused, with the run's other agent
    # (which awaits nothing) in the same request: nothing is queued.
    refused = await stepped.client.post(
        "/v1/messages/batches",
        json={"requests": [{"agent_id": free["id"], "input": "hi"}, {"agent_id": gated["id"], "input": "hello?"}]},
    )
    assert refused.status_code == 409, refused.text
    call_id = pending[gated["id"]]["tool_call"]["tool_call_id"]
    assert f"agent {gated['id']} is waiting for approval" in refused.text and call_id in refused.text
    listed_runs = (await stepped.client.get("/v1/messages/batches")).json()
    assert [r["id"] for r in listed_runs] == [run["id"]]

    answers = [
        {
            "agent_id": gated["id"],
            "messages": [
                {
                    "type": "approval",
                    "approvals": [
                        {
                            "type": "approval",
                            "tool_call_id": pending[gated["id"]]["tool_call"]["tool_call_id"],
                            "approve": False,
                            "reason": "keep it private",
                        }
                    ],
                }
            ],
        },
        {
            "agent_id": clienty["id"],
            "client_tools": [CLIPBOARD],
            "messages": [
                {
                    "type": "tool_return",
                    "tool_returns": [
                        {
                            "type": "tool",
                            "tool_call_id": pending[clienty["id"]]["tool_call"]["tool_call_id"],
                            "tool_return": "milk, bread",
                            "status": "success",
                        }
                    ],
                }
            ],
        },
    ]
    second = await stepped.start(answers)
    ended = await stepped.finish(second["id"])
    assert ended["status"] == "completed", ended
    assert ended["progress"]["agents"]["finished"] == 2, ended["progress"]
    _, after_denial = stepped.model.calls(gated["id"])
    assert any("keep it private" in text for text in conversation(after_denial))
    _, after_return = stepped.model.calls(clienty["id"])
    assert any("milk, bread" in text for text in conversation(after_return))
    assert "read_clipboard" in tool_names(after_return)  # offered again: the request gave it again
    human = json_object(await stepped.client.get(f"/v1/agents/{gated['id']}/core-memory/blocks/human"))
    assert "tea" not in human["value"]
