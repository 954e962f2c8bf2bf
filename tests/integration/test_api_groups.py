"""Sleep-time groups through HTTP, on SQLite and PostgreSQL: /v1/groups, and the group an agent
manages in its views."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from support.api import json_list, json_object

# Nothing here starts a batch run: the apps answer the same without a poller looking for work.
pytestmark = pytest.mark.settings(poller=False)

MODEL = "anthropic/claude-3-5-haiku-20241022"


async def create_agent(client: httpx.AsyncClient, name: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "model": MODEL, "memory_blocks": [{"label": "human", "value": "Ada"}]}
    return json_object(await client.post("/v1/agents/", json={**body, **overrides}))


def sleeptime_config(manager: str, **more: Any) -> dict[str, Any]:
    return {"manager_type": "sleeptime", "manager_agent_id": manager, **more}


async def test_enable_sleeptime_shows_the_group_in_every_view_of_the_agent(client: httpx.AsyncClient) -> None:
    main = await create_agent(client, "main", enable_sleeptime=True)
    plain = await create_agent(client, "plain")
    group = main["managed_group"]
    assert main["enable_sleeptime"] is True
    assert group["manager_type"] == "sleeptime"
    assert group["manager_agent_id"] == main["id"]
    assert group["sleeptime_agent_frequency"] == 5 and group["turns_counter"] == 0
    assert main["multi_agent_group"] == group
    (helper_id,) = group["agent_ids"]
    helper = json_object(await client.get(f"/v1/agents/{helper_id}"))
    assert helper["name"] == "main-sleeptime" and helper["agent_type"] == "sleeptime_agent"
    assert helper["enable_sleeptime"] is False and helper["managed_group"] is None
    assert plain["enable_sleeptime"] is False and plain["managed_group"] is None and plain["multi_agent_group"] is None

    assert json_object(await client.get(f"/v1/agents/{main['id']}"))["managed_group"] == group
    listed = {a["id"]: a for a in json_list(await client.get("/v1/agents/"))}
    assert listed[main["id"]]["managed_group"] == group
    assert listed[plain["id"]]["managed_group"] is None
    assert json_object(await client.get(f"/v1/groups/{group['id']}")) == group
    # Letta's include: the relation filled when named, null when left out.
    named = json_object(await client.get(f"/v1/agents/{main['id']}", params={"include": "agent.managed_group"}))
    assert named["managed_group"] == group
    left_out = json_object(await client.get(f"/v1/agents/{main['id']}", params={"include": "agent.tags"}))
    assert left_out["managed_group"] is None and left_out["enable_sleeptime"] is True
    listed_without = json_list(await client.get("/v1/agents/", params={"include": "agent.blocks"}))
    assert all(a["managed_group"] is None for a in listed_without)
    # An update answers with the group too; false changes nothing, as in Letta.
    updated = json_object(
        await client.patch(f"/v1/agents/{main['id']}", json={"description": "talks", "enable_sleeptime": False})
    )
    assert updated["description"] == "talks" and updated["managed_group"]["id"] == group["id"]
    paired = json_object(await client.patch(f"/v1/agents/{plain['id']}", json={"enable_sleeptime": True}))
    assert paired["enable_sleeptime"] is True and paired["managed_group"]["manager_agent_id"] == plain["id"]


async def test_groups_are_created_listed_changed_and_deleted(client: httpx.AsyncClient) -> None:
    main = await create_agent(client, "main")
    helper = await create_agent(client, "helper")
    other = await create_agent(client, "other")
    made = json_object(
        await client.post(
            "/v1/groups/",
            json={
                "agent_ids": [helper["id"]],
                "description": "keeps memory",
                "manager_config": sleeptime_config(main["id"]),
            },
        )
    )
    assert made["id"].startswith("group-")
    assert made["agent_ids"] == [helper["id"]] and made["manager_agent_id"] == main["id"]
    assert made["description"] == "keeps memory" and made["manager_type"] == "sleeptime"
    assert made["sleeptime_agent_frequency"] is None  # every turn, as Letta's made without one
    assert made["max_turns"] is None and made["termination_token"] is None and made["project_id"] is None
    shown = json_object(await client.get(f"/v1/agents/{main['id']}"))
    assert shown["enable_sleeptime"] is True and shown["managed_group"] == made

    paired = (await create_agent(client, "paired", enable_sleeptime=True))["managed_group"]
    listed = json_list(await client.get("/v1/groups/"))
    assert [g["id"] for g in listed] == [made["id"], paired["id"]]
    assert [g["id"] for g in json_list(await client.get("/v1/groups", params={"order": "desc", "limit": 1}))] == [
        paired["id"]
    ]
    assert json_list(await client.get("/v1/groups/", params={"manager_type": "round_robin"})) == []
    assert len(json_list(await client.get("/v1/groups/", params={"manager_type": "sleeptime"}))) == 2

    changed = json_object(
        await client.patch(
            f"/v1/groups/{made['id']}",
            json={
                "description": "new words",
                "agent_ids": [helper["id"], other["id"]],
                "manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 3},
            },
        )
    )
    assert changed["description"] == "new words" and changed["sleeptime_agent_frequency"] == 3
    assert changed["agent_ids"] == [helper["id"], other["id"]] and changed["manager_agent_id"] == main["id"]
    assert json_object(await client.get(f"/v1/groups/{made['id']}")) == changed

    deleted = json_object(await client.delete(f"/v1/groups/{made['id']}"))
    assert made["id"] in deleted["message"]
    assert (await client.get(f"/v1/groups/{made['id']}")).status_code == 404
    assert (await client.delete(f"/v1/groups/{made['id']}")).status_code == 404
    after = json_object(await client.get(f"/v1/agents/{main['id']}"))
    assert after["enable_sleeptime"] is False and after["managed_group"] is None
    assert (await client.get(f"/v1/agents/{helper['id']}")).status_code == 200  # its agents stay


async def test_hidden_groups_are_listed_only_when_asked(client: httpx.AsyncClient) -> None:
    main = await create_agent(client, "main")
    helper = await create_agent(client, "helper")
    body = {"agent_ids": [helper["id"]], "manager_config": sleeptime_config(main["id"]), "hidden": True}
    hidden = json_object(await client.post("/v1/groups/", json=body))
    assert hidden["hidden"] is True
    assert json_list(await client.get("/v1/groups/")) == []
    assert [g["id"] for g in json_list(await client.get("/v1/groups/", params={"show_hidden_groups": True}))] == [
        hidden["id"]
    ]


@pytest.mark.parametrize("manager_type", ["round_robin", "supervisor", "dynamic", "voice_sleeptime", "swarm"])
async def test_other_manager_types_are_a_422_naming_them(client: httpx.AsyncClient, manager_type: str) -> None:
    main = await create_agent(client, "main")
    helper = await create_agent(client, "helper")
    config = {"manager_type": manager_type, "manager_agent_id": main["id"]}
    refused = await client.post("/v1/groups/", json={"agent_ids": [helper["id"]], "manager_config": config})
    assert refused.status_code == 422, refused.text
    assert manager_type in refused.json()["detail"] and "not supported" in refused.json()["detail"]
    assert refused.json()["field"] == "manager_config.manager_type"
    group = (await create_agent(client, "paired", enable_sleeptime=True))["managed_group"]
    changed = await client.patch(f"/v1/groups/{group['id']}", json={"manager_config": {"manager_type": manager_type}})
    assert changed.status_code == 422 and manager_type in changed.json()["detail"]
    assert json_list(await client.get("/v1/groups/")) == [group]


async def test_bad_groups_are_refused(client: httpx.AsyncClient) -> None:
    main = await create_agent(client, "main")
    helper = await create_agent(client, "helper")
    ids = [helper["id"]]
    # Without a manager config: Letta's default kind, round_robin.
    default = await client.post("/v1/groups/", json={"agent_ids": ids, "description": "d"})
    assert default.status_code == 422 and "round_robin" in default.json()["detail"]
    no_manager = await client.post(
        "/v1/groups/", json={"agent_ids": ids, "manager_config": {"manager_type": "sleeptime"}}
    )
    assert no_manager.status_code == 422 and "manager_agent_id" in no_manager.json()["detail"]
    unknown = await client.post(
        "/v1/groups/", json={"agent_ids": ["agent-missing"], "manager_config": sleeptime_config(main["id"])}
    )
    assert unknown.status_code == 404 and "agent-missing" in unknown.json()["detail"]
    itself = await client.post(
        "/v1/groups/", json={"agent_ids": [main["id"]], "manager_config": sleeptime_config(main["id"])}
    )
    assert itself.status_code == 422
    zero = await client.post(
        "/v1/groups/",
        json={"agent_ids": ids, "manager_config": sleeptime_config(main["id"], sleeptime_agent_frequency=0)},
    )
    assert zero.status_code == 422
    made = await client.post("/v1/groups/", json={"agent_ids": ids, "manager_config": sleeptime_config(main["id"])})
    assert made.status_code == 200, made.text
    again = await client.post("/v1/groups/", json={"agent_ids": ids, "manager_config": sleeptime_config(main["id"])})
    assert again.status_code == 409 and made.json()["id"] in again.json()["detail"]
    assert (await client.get("/v1/groups/group-missing")).status_code == 404
    assert (await client.patch("/v1/groups/group-missing", json={"description": "x"})).status_code == 404
    assert (await client.get("/v1/groups/", params={"manager_type": "nonsense"})).status_code == 422
    assert len(json_list(await client.get("/v1/groups/"))) == 1


async def test_a_groups_messages_are_its_main_agents_in_lettas_shapes(client: httpx.AsyncClient) -> None:
    main = await create_agent(
        client,
        "main",
        enable_sleeptime=True,
        agent_type="memgpt_v2_agent",
        initial_message_sequence=[{"role": "user", "content": f"note {n}"} for n in range(3)],
    )
    group_id = main["managed_group"]["id"]
    own = json_list(await client.get(f"/v1/agents/{main['id']}/messages", params={"order": "asc"}))
    listed = json_list(await client.get(f"/v1/groups/{group_id}/messages", params={"order": "asc", "limit": 100}))
    assert listed == own
    assert [m["content"] for m in listed if m["message_type"] == "user_message"] == ["note 0", "note 1", "note 2"]
    # Letta's default page: the ten newest first.
    newest = json_list(await client.get(f"/v1/groups/{group_id}/messages", params={"limit": 2}))
    assert [m["id"] for m in newest] == [m["id"] for m in reversed(own)][:2]
    assert (await client.get("/v1/groups/group-missing/messages")).status_code == 404


async def test_another_organizations_groups_and_agents_are_not_found(
    client: httpx.AsyncClient, other_org: httpx.AsyncClient
) -> None:
    group = (await create_agent(client, "main", enable_sleeptime=True))["managed_group"]
    outsider = await create_agent(other_org, "outsider")
    assert json_list(await other_org.get("/v1/groups/")) == []
    for method, path, body in [
        ("GET", f"/v1/groups/{group['id']}", None),
        ("PATCH", f"/v1/groups/{group['id']}", {"description": "mine"}),
        ("DELETE", f"/v1/groups/{group['id']}", None),
        ("GET", f"/v1/groups/{group['id']}/messages", None),
    ]:
        response = await other_org.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
    # Nor may a group of one organization name another's agents.
    config = sleeptime_config(outsider["id"])
    refused = await client.post("/v1/groups/", json={"agent_ids": group["agent_ids"], "manager_config": config})
    assert refused.status_code == 404 and outsider["id"] in refused.json()["detail"]
    assert json_object(await client.get(f"/v1/groups/{group['id']}")) == group
