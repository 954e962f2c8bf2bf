"""Agents through HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from support.api import DEFAULT_TOOL_NAMES, json_list, json_object
from support.databases import sqlite_only

# Nothing here starts a batch run: the apps answer the same without a poller looking for work.
pytestmark = pytest.mark.settings(poller=False)

MODEL = "anthropic/claude-3-5-haiku-20241022"

WEATHER_TOOL = '''
def get_weather(city: str, unit: str = "celsius") -> str:
    """Look up the weather in a city.

    Args:
        city: Name of the city.
        unit: celsius or fahrenheit.
    """
    return f"sunny in {city}"
'''


async def create_agent(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "ada",
        "model": MODEL,
        "agent_type": "memgpt_v2_agent",
        "memory_blocks": [
            {"label": "persona", "value": "I am Ada, a careful archivist.", "limit": 200},
            {"label": "human", "value": "The user likes birds.", "description": "What I know of the user"},
        ],
        "tags": ["demo", "archive"],
    }
    body.update(overrides)
    return json_object(await client.post("/v1/agents/", json=body))


async def test_create_agent_has_memory_tools_and_four_messages(client: httpx.AsyncClient) -> None:
    agent = await create_agent(client)
    assert agent["id"].startswith("agent-")
    assert agent["model"] == MODEL
    assert agent["llm_config"]["model"] == "claude-3-5-haiku-20241022"
    assert agent["llm_config"]["model_endpoint_type"] == "anthropic"
    assert [b["label"] for b in agent["blocks"]] == ["persona", "human"]
    tool_names = {t["name"] for t in agent["tools"]}
    assert tool_names == DEFAULT_TOOL_NAMES
    assert len(agent["message_ids"]) == 4

    messages = (await client.get(f"/v1/agents/{agent['id']}/messages", params={"order": "asc"})).json()
    types = [m["message_type"] for m in messages]
    assert types == [
        "system_message",
        "reasoning_message",
        "assistant_message",
        "tool_return_message",
        "user_message",
    ]
    system = messages[0]["content"]
    assert "I am Ada, a careful archivist." in system
    assert "<persona>" in system and "chars_limit=200" in system
    assert "chars_current=30" in system
    assert "What I know of the user" in system
    assert "<memory_metadata>" in system and "0 earlier messages" in system
    assert json.loads(messages[-1]["content"])["type"] == "login"


async def test_default_system_prompt_and_custom_one(client: httpx.AsyncClient) -> None:
    default = await create_agent(client)
    assert "send_message" in default["system"]
    custom = await create_agent(client, name="bob", system="You are Bob.")
    assert custom["system"] == "You are Bob."


async def test_get_list_filter_and_paginate(client: httpx.AsyncClient) -> None:
    ids = [
        (await create_agent(client, name=f"a{i}", tags=["even" if i % 2 == 0 else "odd", "all"]))["id"]
        for i in range(5)
    ]
    assert (await client.get(f"/v1/agents/{ids[0]}")).json()["name"] == "a0"

    listed = (await client.get("/v1/agents")).json()
    assert [a["id"] for a in listed] == ids
    assert [a["name"] for a in (await client.get("/v1/agents/", params={"name": "a3"})).json()] == ["a3"]
    evens = (await client.get("/v1/agents/", params={"tags": "even"})).json()
    assert [a["name"] for a in evens] == ["a0", "a2", "a4"]
    both = (
        await client.get("/v1/agents/", params=[("tags", "even"), ("tags", "all"), ("match_all_tags", "true")])
    ).json()
    assert [a["name"] for a in both] == ["a0", "a2", "a4"]

    first = (await client.get("/v1/agents/", params={"limit": 2})).json()
    second = (await client.get("/v1/agents/", params={"limit": 2, "after": first[-1]["id"]})).json()
    third = (await client.get("/v1/agents/", params={"limit": 2, "after": second[-1]["id"]})).json()
    assert [a["id"] for a in first + second + third] == ids
    before = (await client.get("/v1/agents/", params={"before": ids[2]})).json()
    assert [a["id"] for a in before] == ids[:2]
    just_before = (await client.get("/v1/agents/", params={"before": ids[4], "limit": 2})).json()
    assert [a["id"] for a in just_before] == ids[2:4]
    newest = (await client.get("/v1/agents/", params={"order": "desc", "limit": 2})).json()
    assert [a["id"] for a in newest] == [ids[4], ids[3]]
    older = (await client.get("/v1/agents/", params={"order": "desc", "after": newest[-1]["id"]})).json()
    assert [a["id"] for a in older] == [ids[2], ids[1], ids[0]]


async def test_update_name_system_model_and_tags(client: httpx.AsyncClient) -> None:
    agent = await create_agent(client)
    response = await client.patch(
        f"/v1/agents/{agent['id']}",
        json={"name": "ada2", "system": "You are Ada, version two.", "model": "openai/gpt-4o-mini", "tags": ["x"]},
    )
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["name"] == "ada2"
    assert updated["model"] == "openai/gpt-4o-mini"
    assert updated["llm_config"]["model_endpoint_type"] == "openai"
    assert updated["tags"] == ["x"]
    system = (await client.get(f"/v1/agents/{agent['id']}/messages", params={"order": "asc", "limit": 1})).json()
    assert system[0]["content"].startswith("You are Ada, version two.")


async def test_update_blocks_and_core_memory_routes(client: httpx.AsyncClient) -> None:
    agent = await create_agent(client)
    agent_id = agent["id"]
    persona = (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks/persona")).json()
    assert persona["value"] == "I am Ada, a careful archivist."

    changed = await client.patch(
        f"/v1/agents/{agent_id}/core-memory/blocks/persona", json={"value": "I am Ada, bold and brief."}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["value"] == "I am Ada, bold and brief."
    system = (await client.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 1})).json()
    assert "I am Ada, bold and brief." in system[0]["content"]

    too_long = await client.patch(f"/v1/agents/{agent_id}/core-memory/blocks/persona", json={"value": "x" * 201})
    assert too_long.status_code == 422
    assert "limit" in too_long.json()["detail"]
    assert (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks/nope")).status_code == 404

    listed = (await client.get(f"/v1/agents/{agent_id}/core-memory/blocks")).json()
    assert [b["label"] for b in listed] == ["persona", "human"]

    extra = (await client.post("/v1/blocks/", json={"label": "notes", "value": "shared notes"})).json()
    attached = (await client.patch(f"/v1/agents/{agent_id}/core-memory/blocks/attach/{extra['id']}")).json()
    assert [b["label"] for b in attached["blocks"]] == ["persona", "human", "notes"]
    detached = (await client.patch(f"/v1/agents/{agent_id}/core-memory/blocks/detach/{extra['id']}")).json()
    assert [b["label"] for b in detached["blocks"]] == ["persona", "human"]

    replaced = await client.patch(f"/v1/agents/{agent_id}", json={"block_ids": [extra["id"]]})
    assert [b["label"] for b in replaced.json()["blocks"]] == ["notes"]
    system = (await client.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 1})).json()
    assert "<notes>" in system[0]["content"] and "<persona>" not in system[0]["content"]


async def test_tools_attach_detach_and_by_name(client: httpx.AsyncClient) -> None:
    tool = (await client.post("/v1/tools/", json={"source_code": WEATHER_TOOL})).json()
    agent = await create_agent(client, tools=["get_weather"], include_base_tools=False)
    assert [t["name"] for t in agent["tools"]] == ["get_weather"]

    bare = await create_agent(client, name="bare", include_base_tools=False)
    assert bare["tools"] == []
    attached = (await client.patch(f"/v1/agents/{bare['id']}/tools/attach/{tool['id']}")).json()
    assert [t["name"] for t in attached["tools"]] == ["get_weather"]
    listed = (await client.get(f"/v1/agents/{bare['id']}/tools")).json()
    assert [t["id"] for t in listed] == [tool["id"]]
    detached = (await client.patch(f"/v1/agents/{bare['id']}/tools/detach/{tool['id']}")).json()
    assert detached["tools"] == []
    assert (await client.patch(f"/v1/agents/{bare['id']}/tools/detach/{tool['id']}")).status_code == 404
    assert (await client.patch(f"/v1/agents/{bare['id']}/tools/attach/tool-nope")).status_code == 422


async def test_tool_rules_are_stored_and_validated(client: httpx.AsyncClient) -> None:
    rules: list[dict[str, Any]] = [
        {"type": "run_first", "tool_name": "archival_memory_search"},
        {"type": "exit_loop", "tool_name": "send_message"},
        {"type": "constrain_child_tools", "tool_name": "archival_memory_search", "children": ["send_message"]},
        {"type": "max_count_per_step", "tool_name": "conversation_search", "max_count_limit": 2},
        {
            "type": "conditional",
            "tool_name": "core_memory_append",
            "child_output_mapping": {"ok": "send_message"},
            "default_child": "send_message",
        },
    ]
    agent = await create_agent(client, tool_rules=rules)
    assert [r["type"] for r in agent["tool_rules"]] == [r["type"] for r in rules]

    # As in Letta, a rule may name a tool the agent lacks, and repeats are dropped.
    unknown = await client.post(
        "/v1/agents/",
        json={
            "name": "x",
            "model": MODEL,
            "tool_rules": [{"type": "exit_loop", "tool_name": "nope"}, {"type": "exit_loop", "tool_name": "nope"}],
        },
    )
    assert unknown.status_code == 200, unknown.text
    assert [(r["type"], r["tool_name"]) for r in unknown.json()["tool_rules"]] == [("exit_loop", "nope")]
    bad_type = await client.post(
        "/v1/agents/", json={"name": "x", "model": MODEL, "tool_rules": [{"type": "sometimes", "tool_name": "a"}]}
    )
    assert bad_type.status_code == 422
    # A rule naming a tool does not block its detachment: the rule stays.
    send = next(t for t in agent["tools"] if t["name"] == "send_message")
    detached = await client.patch(f"/v1/agents/{agent['id']}/tools/detach/{send['id']}")
    assert detached.status_code == 200, detached.text
    assert len(detached.json()["tool_rules"]) == len(rules)
    cleared = await client.patch(f"/v1/agents/{agent['id']}", json={"tool_rules": []})
    assert cleared.json()["tool_rules"] == []


@sqlite_only
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x"}, "model"),
        ({"name": "x", "model": "claude"}, "model"),
        ({"name": "x", "model": "mistral/large"}, "model"),
        ({"name": "x", "model": MODEL, "memory_blocks": [{"label": "a", "value": "xx", "limit": 1}]}, "value"),
        (
            {
                "name": "x",
                "model": MODEL,
                "memory_blocks": [{"label": "a", "value": "1"}, {"label": "a", "value": "2"}],
            },
            "memory_blocks",
        ),
        ({"name": "x", "model": MODEL, "tool_ids": ["tool-missing"]}, "tool_ids"),
        ({"name": "x", "model": MODEL, "tools": ["missing_tool"]}, "tools"),
        ({"name": "x", "model": MODEL, "block_ids": ["block-missing"]}, "block_ids"),
        ({"name": "x", "model": MODEL, "tags": "notalist"}, "tags"),
        ({"name": "x", "model": MODEL, "llm_config": {"model": "m", "max_tokens": 0}}, "llm_config.max_tokens"),
    ],
)
async def test_bad_create_bodies_are_422_with_the_field(
    client: httpx.AsyncClient, body: dict[str, object], field: str
) -> None:
    response = await client.post("/v1/agents/", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert (await client.get("/v1/agents/")).json() == []


@sqlite_only
async def test_not_json_and_unknown_ids(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/agents/", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert (await client.get("/v1/agents/agent-nope")).status_code == 404
    assert (await client.patch("/v1/agents/agent-nope", json={"name": "x"})).status_code == 404
    assert (await client.delete("/v1/agents/agent-nope")).status_code == 404
    assert (await client.get("/v1/agents/agent-nope/messages")).status_code == 404
    assert (await client.get("/v1/agents/agent-nope/core-memory/blocks/human")).status_code == 404


async def test_delete_keeps_shared_blocks(client: httpx.AsyncClient) -> None:
    shared = (await client.post("/v1/blocks/", json={"label": "team", "value": "We ship on Fridays."})).json()
    one = await create_agent(client, name="one", block_ids=[shared["id"]])
    two = await create_agent(client, name="two", block_ids=[shared["id"]])
    own_blocks = [b["id"] for b in one["blocks"] if b["id"] != shared["id"]]

    assert (await client.delete(f"/v1/agents/{one['id']}")).status_code == 200
    assert (await client.get(f"/v1/agents/{one['id']}")).status_code == 404
    assert (await client.get(f"/v1/blocks/{shared['id']}")).status_code == 200
    for block_id in own_blocks:
        assert (await client.get(f"/v1/blocks/{block_id}")).status_code == 404
    remaining = (await client.get(f"/v1/agents/{two['id']}")).json()
    assert shared["id"] in [b["id"] for b in remaining["blocks"]]


async def test_include_fills_only_the_relations_asked_for(client: httpx.AsyncClient) -> None:
    agent = await create_agent(client, tags=["t"], secrets={"TOKEN": "s3cret"})
    assert agent["tools"] and agent["blocks"] and agent["tags"] == ["t"] and agent["secrets"]
    # Letta's include: only the relations named; the rest of the agent as always.
    (listed,) = json_list(
        await client.get("/v1/agents/", params=[("include", "agent.blocks"), ("include", "agent.tags")])
    )
    assert listed["tools"] == [] and listed["secrets"] == [] and listed["tool_exec_environment_variables"] == []
    assert listed["blocks"] == agent["blocks"] and listed["memory"]["blocks"] == agent["blocks"]
    assert (
        listed["tags"] == ["t"] and listed["system"] == agent["system"] and listed["llm_config"] == agent["llm_config"]
    )
    one = json_object(await client.get(f"/v1/agents/{agent['id']}", params={"include": "agent.tools"}))
    assert one["tools"] == agent["tools"] and one["blocks"] == [] and one["tags"] == []
    # A relation nightshift has nothing for is accepted; an unknown one is a 422.
    none = json_object(await client.get(f"/v1/agents/{agent['id']}", params={"include": "agent.sources"}))
    assert none["tools"] == [] and none["blocks"] == [] and none["sources"] == []
    assert (await client.get("/v1/agents/", params={"include": "agent.nothing"})).status_code == 422
    # Without include, everything, as before.
    assert json_object(await client.get(f"/v1/agents/{agent['id']}")) == agent | {
        "updated_at": one["updated_at"],
        "message_ids": one["message_ids"],
    }
