"""GET /v1/messages/batches/{id}/messages: every message of a run, in order, paged and filtered."""

from __future__ import annotations

from typing import Any

import httpx

from integration.batch.kit import by_agent, call, say
from support.api import json_object
from support.stepped import SteppedRuns


async def _page(client: httpx.AsyncClient, run_id: str, **params: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json_object(
        await client.get(f"/v1/messages/batches/{run_id}/messages", params=params)
    )["messages"]
    return messages


async def _two_step_run(stepped: SteppedRuns) -> tuple[str, list[dict[str, Any]]]:
    agents = [await stepped.agent(f"m{i}") for i in range(3)]
    for agent in agents:
        stepped.model.script(agent["id"], call("conversation_search", heartbeat=True, query="x"), say("done"))
    run = await stepped.start([{"agent_id": a["id"], "input": f"hello {a['name']}"} for a in agents])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    return run["id"], agents


async def test_messages_come_in_creation_order_with_roles_per_agent(stepped: SteppedRuns) -> None:
    run_id, agents = await _two_step_run(stepped)
    everything = await _page(stepped.client, run_id, order="asc", limit=1000)
    assert len(everything) == 18
    stamps = [m["created_at"] for m in everything]
    assert stamps == sorted(stamps)
    ids = [m["id"] for m in everything]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert by_agent(everything) == {a["id"]: ["user", "assistant", "tool", "user", "assistant", "tool"] for a in agents}
    for message in everything:
        assert message["batch_item_id"] is not None
        if message["role"] == "tool":
            assert message["tool_call_id"] and message["name"] in ("conversation_search", "send_message")
        if message["role"] == "assistant":
            assert len(message["tool_calls"]) == 1

    newest_first = await _page(stepped.client, run_id, order="desc", limit=1000)
    assert [m["id"] for m in newest_first] == ids[::-1]
    default = await _page(stepped.client, run_id)
    assert [m["id"] for m in default] == ids[::-1]  # Letta's default order is newest first


async def test_pages_have_no_gaps_or_repeats(stepped: SteppedRuns) -> None:
    run_id, _ = await _two_step_run(stepped)
    ids = [m["id"] for m in await _page(stepped.client, run_id, order="asc", limit=1000)]
    for order, expected in (("asc", ids), ("desc", ids[::-1])):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await _page(stepped.client, run_id, order=order, limit=2, **({"after": cursor} if cursor else {}))
            assert len(page) <= 2
            if not page:
                break
            seen.extend(m["id"] for m in page)
            cursor = page[-1]["id"]
        assert seen == expected, order
    # ``before`` walks backwards from a cursor.
    before = await _page(stepped.client, run_id, order="asc", limit=3, before=ids[10])
    assert [m["id"] for m in before] == ids[7:10]


async def test_agent_filter(stepped: SteppedRuns) -> None:
    run_id, agents = await _two_step_run(stepped)
    one = agents[1]["id"]
    mine = await _page(stepped.client, run_id, order="asc", agent_id=one)
    assert [m["agent_id"] for m in mine] == [one] * 6
    assert [m["role"] for m in mine] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert mine[0]["content"] == [{"type": "text", "text": f"hello {agents[1]['name']}"}]
    assert await _page(stepped.client, run_id, agent_id="agent-unknown") == []


async def test_messages_of_an_unknown_run(stepped: SteppedRuns) -> None:
    response = await stepped.client.get("/v1/messages/batches/batch-nope/messages")
    assert response.status_code == 404
    assert "batch-nope" in response.json()["detail"]


async def test_messages_are_scoped_to_their_run(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("twice")
    first = await stepped.start([{"agent_id": agent["id"], "input": "first run"}])
    await stepped.finish(first["id"])
    second = await stepped.start([{"agent_id": agent["id"], "input": "second run"}])
    await stepped.finish(second["id"])
    one = await _page(stepped.client, first["id"], order="asc")
    two = await _page(stepped.client, second["id"], order="asc")
    assert one[0]["content"][0]["text"] == "first run"
    assert two[0]["content"][0]["text"] == "second run"
    assert not {m["id"] for m in one} & {m["id"] for m in two}
