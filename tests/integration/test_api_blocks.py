"""Standalone and shared blocks through HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from support.api import json_object
from support.databases import sqlite_only

# Nothing here starts a batch run: the apps answer the same without a poller looking for work.
pytestmark = pytest.mark.settings(poller=False)

MODEL = "anthropic/claude-3-5-haiku-20241022"


async def create_block(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    return json_object(await client.post("/v1/blocks/", json=body))


async def create_agent(client: httpx.AsyncClient, name: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "model": MODEL,
        "memory_blocks": [{"label": "persona", "value": f"I am {name}."}],
    }
    body.update(overrides)
    return json_object(await client.post("/v1/agents/", json=body))


async def system_message(client: httpx.AsyncClient, agent_id: str) -> str:
    messages = (await client.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 1})).json()
    assert messages[0]["message_type"] == "system_message"
    text: str = messages[0]["content"]
    return text


async def test_create_and_retrieve(client: httpx.AsyncClient) -> None:
    block = await create_block(
        client,
        label="team",
        value="We ship on Fridays.",
        limit=100,
        description="How the team works",
        read_only=True,
        metadata={"owner": "ops"},
    )
    assert block["id"].startswith("block-")
    assert block["label"] == "team"
    assert block["value"] == "We ship on Fridays."
    assert block["limit"] == 100
    assert block["description"] == "How the team works"
    assert block["read_only"] is True
    assert block["metadata"] == {"owner": "ops"}
    assert (await client.get(f"/v1/blocks/{block['id']}")).json() == block

    plain = (await client.post("/v1/blocks", json={"label": "notes", "value": ""})).json()
    assert plain["limit"] == 20_000
    assert plain["description"] is None
    assert plain["read_only"] is False
    assert plain["metadata"] == {}


@sqlite_only
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"label": "x", "value": "12345", "limit": 4}, "value"),
        ({"label": "x", "value": "ok", "limit": 0}, "limit"),
        ({"label": "", "value": "ok"}, "label"),
        ({"label": "   ", "value": "ok"}, "label"),
        ({"value": "ok"}, "label"),
        ({"label": "x"}, "value"),
    ],
)
async def test_bad_create_is_422_with_the_field(client: httpx.AsyncClient, body: dict[str, Any], field: str) -> None:
    response = await client.post("/v1/blocks/", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert (await client.get("/v1/blocks/")).json() == []


async def test_value_over_limit_says_so(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/blocks/", json={"label": "x", "value": "12345", "limit": 4})
    assert response.json()["detail"] == "block 'x' holds 5 characters, over its limit of 4"


async def test_list_filters_by_label_and_pages_without_gaps(client: httpx.AsyncClient) -> None:
    ids = [(await create_block(client, label="even" if n % 2 == 0 else "odd", value=f"v{n}"))["id"] for n in range(7)]
    for path in ("/v1/blocks/", "/v1/blocks"):
        listed = (await client.get(path)).json()
        assert [b["id"] for b in listed] == ids
    evens = (await client.get("/v1/blocks/", params={"label": "even"})).json()
    assert [b["value"] for b in evens] == ["v0", "v2", "v4", "v6"]
    assert (await client.get("/v1/blocks/", params={"label": "none"})).json() == []

    seen: list[str] = []
    after: str | None = None
    for _ in range(20):
        params: dict[str, Any] = {"limit": 3}
        if after is not None:
            params["after"] = after
        page = (await client.get("/v1/blocks/", params=params)).json()
        if not page:
            break
        assert len(page) <= 3
        seen += [b["id"] for b in page]
        after = page[-1]["id"]
    assert seen == ids

    odd_page = (await client.get("/v1/blocks/", params={"label": "odd", "limit": 2, "after": ids[1]})).json()
    assert [b["value"] for b in odd_page] == ["v3", "v5"]
    newest = (await client.get("/v1/blocks/", params={"order": "desc", "limit": 2})).json()
    assert [b["id"] for b in newest] == [ids[6], ids[5]]
    before = (await client.get("/v1/blocks/", params={"before": ids[2]})).json()
    assert [b["id"] for b in before] == ids[:2]


async def test_patch_changes_only_the_given_fields(client: httpx.AsyncClient) -> None:
    block = await create_block(client, label="notes", value="one", limit=50, description="d", metadata={"k": 1})
    response = await client.patch(f"/v1/blocks/{block['id']}", json={"value": "two", "read_only": True})
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["value"] == "two"
    assert updated["read_only"] is True
    assert (updated["label"], updated["limit"], updated["description"], updated["metadata"]) == (
        "notes",
        50,
        "d",
        {"k": 1},
    )
    assert updated["updated_at"] >= block["updated_at"]
    assert (await client.get(f"/v1/blocks/{block['id']}")).json() == updated

    relabelled = await client.patch(
        f"/v1/blocks/{block['id']}", json={"label": "journal", "limit": 10, "description": None}
    )
    assert relabelled.status_code == 200, relabelled.text
    assert (relabelled.json()["label"], relabelled.json()["limit"]) == ("journal", 10)
    assert relabelled.json()["description"] is None


async def test_null_fields_leave_the_block_as_it_is(client: httpx.AsyncClient) -> None:
    block = await create_block(client, label="notes", value="kept", limit=50, metadata={"k": 1})
    nulls = {"value": None, "label": None, "limit": None, "read_only": None, "metadata": None}
    response = await client.patch(f"/v1/blocks/{block['id']}", json=nulls)
    assert response.status_code == 200, response.text
    kept = response.json()
    assert (kept["value"], kept["label"], kept["limit"], kept["read_only"], kept["metadata"]) == (
        "kept",
        "notes",
        50,
        False,
        {"k": 1},
    )


async def test_value_over_limit_on_update_is_422_and_changes_nothing(client: httpx.AsyncClient) -> None:
    block = await create_block(client, label="notes", value="12345", limit=10)
    too_long = await client.patch(f"/v1/blocks/{block['id']}", json={"value": "x" * 11})
    assert too_long.status_code == 422
    assert too_long.json()["field"] == "value"
    assert "limit of 10" in too_long.json()["detail"]
    lowered = await client.patch(f"/v1/blocks/{block['id']}", json={"limit": 4})
    assert lowered.status_code == 422
    assert lowered.json()["field"] == "value"
    zero = await client.patch(f"/v1/blocks/{block['id']}", json={"limit": 0})
    assert zero.status_code == 422
    assert zero.json()["field"] == "limit"
    empty_label = await client.patch(f"/v1/blocks/{block['id']}", json={"label": ""})
    assert empty_label.status_code == 422
    assert empty_label.json()["field"] == "label"
    assert (await client.get(f"/v1/blocks/{block['id']}")).json() == block

    both = await client.patch(f"/v1/blocks/{block['id']}", json={"value": "x" * 20, "limit": 20})
    assert both.status_code == 200, both.text
    assert (both.json()["value"], both.json()["limit"]) == ("x" * 20, 20)


async def test_delete_then_404(client: httpx.AsyncClient) -> None:
    block = await create_block(client, label="notes", value="bye")
    response = await client.delete(f"/v1/blocks/{block['id']}")
    assert response.status_code == 200, response.text
    assert (await client.get(f"/v1/blocks/{block['id']}")).status_code == 404
    assert (await client.patch(f"/v1/blocks/{block['id']}", json={"value": "x"})).status_code == 404
    assert (await client.delete(f"/v1/blocks/{block['id']}")).status_code == 404
    assert (await client.get(f"/v1/blocks/{block['id']}/agents")).status_code == 404
    assert (await client.get("/v1/blocks/")).json() == []


@sqlite_only
async def test_unknown_block_ids_are_404(client: httpx.AsyncClient) -> None:
    for method, path in [
        ("GET", "/v1/blocks/block-nope"),
        ("PATCH", "/v1/blocks/block-nope"),
        ("DELETE", "/v1/blocks/block-nope"),
        ("GET", "/v1/blocks/block-nope/agents"),
    ]:
        response = await client.request(method, path, json={"value": "x"} if method == "PATCH" else None)
        assert response.status_code == 404, (method, path, response.text)
        assert "block-nope" in response.json()["detail"]


async def test_shared_block_update_shows_in_both_agents(client: httpx.AsyncClient) -> None:
    shared = await create_block(client, label="team", value="We ship on Fridays.", limit=100)
    one = await create_agent(client, "one", block_ids=[shared["id"]])
    two = await create_agent(client, "two")
    attached = await client.patch(f"/v1/agents/{two['id']}/core-memory/blocks/attach/{shared['id']}")
    assert attached.status_code == 200, attached.text
    for agent_id in (one["id"], two["id"]):
        assert "We ship on Fridays." in await system_message(client, agent_id)

    users = (await client.get(f"/v1/blocks/{shared['id']}/agents")).json()
    assert sorted(a["id"] for a in users) == sorted([one["id"], two["id"]])
    assert {a["name"] for a in users} == {"one", "two"}

    response = await client.patch(f"/v1/blocks/{shared['id']}", json={"value": "We ship on Mondays."})
    assert response.status_code == 200, response.text
    for agent_id in (one["id"], two["id"]):
        agent = (await client.get(f"/v1/agents/{agent_id}")).json()
        team = [b for b in agent["blocks"] if b["id"] == shared["id"]]
        assert [b["value"] for b in team] == ["We ship on Mondays."]
        assert [b["value"] for b in agent["memory"]["blocks"] if b["label"] == "team"] == ["We ship on Mondays."]
        by_label = (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks/team")).json()
        assert by_label["id"] == shared["id"]
        assert by_label["value"] == "We ship on Mondays."

    # A change through one agent's core memory shows in the other agent too.
    through_one = await client.patch(
        f"/v1/agents/{one['id']}/core-memory/blocks/team", json={"value": "We ship daily."}
    )
    assert through_one.status_code == 200, through_one.text
    assert "We ship daily." in await system_message(client, one["id"])
    other = (await client.get(f"/v1/agents/{two['id']}/core-memory/blocks/team")).json()
    assert other["value"] == "We ship daily."
    assert (await client.get(f"/v1/blocks/{shared['id']}")).json()["value"] == "We ship daily."


async def test_relabel_is_seen_by_agents_and_a_clash_is_422(client: httpx.AsyncClient) -> None:
    shared = await create_block(client, label="team", value="Fridays.")
    one = await create_agent(client, "one", block_ids=[shared["id"]])
    two = await create_agent(
        client, "two", block_ids=[shared["id"]], memory_blocks=[{"label": "notes", "value": "mine"}]
    )

    clash = await client.patch(f"/v1/blocks/{shared['id']}", json={"label": "notes"})
    assert clash.status_code == 422, clash.text
    assert clash.json()["field"] == "label"
    assert two["id"] in clash.json()["detail"]
    also = await client.patch(f"/v1/agents/{one['id']}/core-memory/blocks/team", json={"label": "persona"})
    assert also.status_code == 422, also.text
    assert (await client.get(f"/v1/blocks/{shared['id']}")).json()["label"] == "team"

    renamed = await client.patch(f"/v1/blocks/{shared['id']}", json={"label": "crew"})
    assert renamed.status_code == 200, renamed.text
    for agent_id in (one["id"], two["id"]):
        assert (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks/crew")).json()["id"] == shared["id"]
        assert (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks/team")).status_code == 404


async def test_deleting_a_shared_block_detaches_it_from_both_agents(client: httpx.AsyncClient) -> None:
    shared = await create_block(client, label="team", value="We ship on Fridays.")
    one = await create_agent(client, "one", block_ids=[shared["id"]])
    two = await create_agent(client, "two", block_ids=[shared["id"]])
    assert len((await client.get(f"/v1/blocks/{shared['id']}/agents")).json()) == 2

    assert (await client.delete(f"/v1/blocks/{shared['id']}")).status_code == 200
    for agent_id in (one["id"], two["id"]):
        agent = (await client.get(f"/v1/agents/{agent_id}")).json()
        assert [b["label"] for b in agent["blocks"]] == ["persona"]
        assert [b["label"] for b in agent["memory"]["blocks"]] == ["persona"]
        assert (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks/team")).status_code == 404
        labels = [b["label"] for b in (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks")).json()]
        assert labels == ["persona"]
    # The agents still work: they can be changed and get a new block under the old label.
    fresh = await create_block(client, label="team", value="New rules.")
    attached = await client.patch(f"/v1/agents/{one['id']}/core-memory/blocks/attach/{fresh['id']}")
    assert attached.status_code == 200, attached.text
    assert [b["label"] for b in attached.json()["blocks"]] == ["persona", "team"]


async def test_block_agents_lists_only_agents_using_it(client: httpx.AsyncClient) -> None:
    lonely = await create_block(client, label="team", value="nobody")
    assert (await client.get(f"/v1/blocks/{lonely['id']}/agents")).json() == []
    agent = await create_agent(client, "one")
    persona = agent["blocks"][0]
    users = (await client.get(f"/v1/blocks/{persona['id']}/agents")).json()
    assert [a["id"] for a in users] == [agent["id"]]
    detached = await client.patch(f"/v1/agents/{agent['id']}/core-memory/blocks/detach/{persona['id']}")
    assert detached.status_code == 200
    assert (await client.get(f"/v1/blocks/{persona['id']}/agents")).json() == []


async def test_block_agents_and_agent_blocks_page_to_an_end(client: httpx.AsyncClient) -> None:
    shared = await create_block(client, label="team", value="Fridays.")
    agents = [(await create_agent(client, f"a{n}", block_ids=[shared["id"]]))["id"] for n in range(3)]
    path = f"/v1/blocks/{shared['id']}/agents"
    assert [a["id"] for a in (await client.get(path)).json()] == agents
    first = (await client.get(path, params={"limit": 2})).json()
    assert [a["id"] for a in first] == agents[:2]
    rest = (await client.get(path, params={"limit": 2, "after": first[-1]["id"]})).json()
    assert [a["id"] for a in rest] == agents[2:]
    assert (await client.get(path, params={"after": agents[-1]})).json() == []
    assert [a["id"] for a in (await client.get(path, params={"order": "desc"})).json()] == agents[::-1]

    # An agent's blocks keep their order (own blocks, then shared ones) across pages.
    agent_id = agents[0]
    blocks_path = f"/v1/agents/{agent_id}/core-memory/blocks"
    extra = await create_block(client, label="notes", value="n")
    await client.patch(f"/v1/agents/{agent_id}/core-memory/blocks/attach/{extra['id']}")
    everything = [b["label"] for b in (await client.get(blocks_path)).json()]
    assert everything == ["persona", "team", "notes"]
    seen: list[str] = []
    after: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 1} | ({"after": after} if after else {})
        page = (await client.get(blocks_path, params=params)).json()
        if not page:
            break
        seen += [b["label"] for b in page]
        after = page[-1]["id"]
    assert seen == everything
    assert [b["label"] for b in (await client.get(blocks_path, params={"order": "desc"})).json()] == everything[::-1]
    assert (await client.get(blocks_path, params={"after": "block-unknown"})).json() == []
