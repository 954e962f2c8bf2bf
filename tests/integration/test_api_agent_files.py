"""Agent Files through HTTP: what a bad file gets (a 422 naming it, nothing created) and the import options."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from nightshift.domain.limits import MAX_JSON_DEPTH
from support.agent_files import SUPPORT_DESK, document, double_encoded
from support.api import create_tool, json_list, json_object
from support.databases import sqlite_only

# Nothing here starts a batch run: the apps answer the same without a poller looking for work.
pytestmark = pytest.mark.settings(poller=False)

Doc = dict[str, Any]
MODEL = "anthropic/claude-3-5-haiku-20241022"


async def _import(client: httpx.AsyncClient, content: bytes, **form: str) -> httpx.Response:
    return await client.post("/v1/agents/import", files={"file": ("agent.af", content)}, data=form)


async def _counts(client: httpx.AsyncClient) -> tuple[int, int, int]:
    agents = json_list(await client.get("/v1/agents/", params={"limit": 1000}))
    tools = json_list(await client.get("/v1/tools/", params={"limit": 1000}))
    blocks = json_list(await client.get("/v1/blocks/", params={"limit": 1000}))
    return len(agents), len(tools), len(blocks)


def _agent(doc: Doc, index: int) -> Doc:
    agent: Doc = doc["agents"][index]
    return agent


def _tool(doc: Doc, name: str) -> Doc:
    return next(t for t in doc["tools"] if t["name"] == name)


def _unknown_builtin(doc: Doc) -> None:
    doc["tools"].append({"id": "tool-9", "name": "web_search", "tool_type": "letta_builtin", "source_code": None})
    _agent(doc, 0)["tool_ids"].append("tool-9")


def _second_agent_rule(doc: Doc) -> None:
    # The first agent and every tool are fine: the second agent's rule fails after they were written.
    _agent(doc, 1)["tool_rules"] += [
        {"tool_name": "escalate", "type": "exit_loop"},
        {"tool_name": "escalate", "type": "continue_loop"},
    ]


def _stray_result(doc: Doc) -> None:
    _agent(doc, 0)["messages"][5]["tool_call_id"] = "call_nobody"
    _agent(doc, 0)["messages"][5]["tool_returns"][0]["tool_call_id"] = "call_nobody"


BAD_FILES: dict[str, tuple[Callable[[Doc], None], str]] = {
    "unknown block": (lambda d: _agent(d, 0)["block_ids"].append("block-9"), "block-9"),
    "unknown tool": (lambda d: _agent(d, 1)["tool_ids"].append("tool-7"), "tool-7"),
    "built-in we lack": (_unknown_builtin, "web_search (letta_builtin)"),
    "custom tool without source": (lambda d: _tool(d, "lookup_order").update(source_code=None), "no source_code"),
    "custom tool that does not parse": (
        lambda d: _tool(d, "escalate").update(source_code="def escalate(:\n"),
        "does not parse",
    ),
    "rule of the second agent": (_second_agent_rule, "agent agent-1 ('ark'): escalate: a tool cannot be both"),
    "unknown rule type": (
        lambda d: _agent(d, 0)["tool_rules"].append({"tool_name": "escalate", "type": "sometimes"}),
        "invalid tool rule",
    ),
    "unknown provider": (
        lambda d: _agent(d, 0)["llm_config"].update(handle="mistral/large", model_endpoint_type="mistral"),
        "unknown provider 'mistral'",
    ),
    "a group of another kind": (
        lambda d: d["groups"].append(
            {"id": "group-0", "agent_ids": ["agent-1"], "manager_config": {"manager_type": "round_robin"}}
        ),
        "manager_type 'round_robin' is not supported",
    ),
    "a group of an agent not in the file": (
        lambda d: d["groups"].append(
            {
                "id": "group-0",
                "agent_ids": ["agent-7"],
                "manager_config": {"manager_type": "sleeptime", "manager_agent_id": "agent-0"},
            }
        ),
        "agent-7",
    ),
    "window without its system message": (
        lambda d: _agent(d, 0)["in_context_message_ids"].pop(0),
        "must start with the system message",
    ),
    "approval message": (lambda d: _agent(d, 1)["messages"][1].update(role="approval"), "role 'approval'"),
    "block over its limit": (lambda d: d["blocks"][1].update(limit=5), "over its limit of 5"),
    "result of no call": (_stray_result, "call_nobody"),
    "repeated id": (lambda d: d["blocks"][3].update(id="block-0"), "'block-0' (block) is used twice"),
    "no agents": (lambda d: d.update(agents=[]), "agents"),
    "a block without label": (lambda d: d["blocks"][0].pop("label"), "blocks.0.label"),
}


@pytest.mark.parametrize("case", BAD_FILES)
async def test_a_bad_file_is_a_422_naming_it_and_nothing_is_created(client: httpx.AsyncClient, case: str) -> None:
    await create_tool(client, "def unrelated() -> str:\n    '''A tool made before.'''\n    return 'x'\n")
    before = await _counts(client)
    doc = document(SUPPORT_DESK)
    change, expected = BAD_FILES[case]
    change(doc)
    response = await _import(client, double_encoded(doc))
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    assert await _counts(client) == before


@sqlite_only
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", "not JSON"),
        (json.dumps(json.dumps({"agent": {}})).encode(), "not an Agent File"),
        (json.dumps([1, 2]).encode(), "not an Agent File"),
    ],
)
async def test_what_is_not_an_agent_file_is_a_422(client: httpx.AsyncClient, content: bytes, expected: str) -> None:
    response = await _import(client, content)
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    assert response.json()["field"] == "file"


async def test_override_existing_tools_replaces_the_source_or_keeps_it(client: httpx.AsyncClient) -> None:
    mine = (
        "def lookup_order(order_id: str) -> str:\n"
        "    '''Mine.\n\n    Args:\n        order_id: Id.\n    '''\n"
        "    return 'mine'\n"
    )
    existing = await create_tool(client, mine)
    kept = json_object(await _import(client, SUPPORT_DESK.read_bytes(), override_existing_tools="false"))
    agent = json_object(await client.get(f"/v1/agents/{kept['agent_ids'][0]}"))
    (lookup,) = [t for t in agent["tools"] if t["name"] == "lookup_order"]
    assert lookup["id"] == existing["id"]
    assert json_object(await client.get(f"/v1/tools/{existing['id']}"))["source_code"] == mine

    await _import(client, SUPPORT_DESK.read_bytes())  # Letta's default: the file's source wins
    replaced = json_object(await client.get(f"/v1/tools/{existing['id']}"))
    assert replaced["source_code"] == _tool(document(SUPPORT_DESK), "lookup_order")["source_code"]
    assert len(json_list(await client.get("/v1/tools/", params={"name": "lookup_order"}))) == 1


async def test_built_in_tools_of_the_file_are_the_organizations_base_tools(client: httpx.AsyncClient) -> None:
    doc = document(SUPPORT_DESK)
    _tool(doc, "send_message").update(source_code="def send_message(message: str) -> str:\n    return 'hijacked'\n")
    (tess_id, _) = json_object(await _import(client, double_encoded(doc)))["agent_ids"]
    tess = json_object(await client.get(f"/v1/agents/{tess_id}"))
    types = {t["name"]: t["tool_type"] for t in tess["tools"]}
    assert types == {
        "escalate": "custom",
        "send_message": "letta_core",
        "lookup_order": "custom",
        "core_memory_append": "letta_memory_core",
    }
    send = next(t for t in tess["tools"] if t["name"] == "send_message")
    assert send["source_code"] is None or "hijacked" not in send["source_code"]


async def test_import_options(client: httpx.AsyncClient) -> None:
    body = json_object(
        await _import(
            client,
            SUPPORT_DESK.read_bytes(),
            name="desk",
            strip_messages="true",
            model="anthropic/claude-3-5-haiku-20241022",
            secrets=json.dumps({"ORDERS_API_KEY": "k-9931", "UNNAMED": "x"}),
            project_id="project-1",
        )
    )
    agents = [json_object(await client.get(f"/v1/agents/{i}")) for i in body["agent_ids"]]
    assert [a["name"] for a in agents] == ["desk", "desk"]
    assert {a["model"] for a in agents} == {"anthropic/claude-3-5-haiku-20241022"}
    for agent in agents:
        (only,) = json_list(await client.get(f"/v1/agents/{agent['id']}/messages"))
        assert agent["message_ids"] == [only["id"]]
        assert only["message_type"] == "system_message"
    assert [s["key"] for s in agents[0]["secrets"]] == ["ORDERS_API_KEY"]
    exported = (await client.get(f"/v1/agents/{agents[0]['id']}/export")).text
    assert "k-9931" not in exported
    assert json.loads(exported)["agents"][0]["tool_exec_environment_variables"] == {"ORDERS_API_KEY": ""}

    kept = json_object(await _import(client, SUPPORT_DESK.read_bytes(), append_copy_suffix="false"))
    assert json_object(await client.get(f"/v1/agents/{kept['agent_ids'][0]}"))["name"] == "tess"


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"secrets": "[1]"}, "secrets"),
        ({"env_vars_json": "{"}, "env_vars_json"),
        ({"model": "nowhere/model"}, "model"),
        ({"append_copy_suffix": "maybe"}, None),
    ],
)
async def test_bad_options_are_a_422(client: httpx.AsyncClient, form: dict[str, str], field: str | None) -> None:
    before = await _counts(client)
    response = await _import(client, SUPPORT_DESK.read_bytes(), **form)
    assert response.status_code == 422, response.text
    if field is not None:
        assert response.json()["field"] == field
    assert await _counts(client) == before


async def test_export_of_an_unknown_agent_is_a_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/agents/agent-00000000-0000-7000-8000-000000000000/export")
    assert response.status_code == 404
    agent_id = json_object(await _import(client, SUPPORT_DESK.read_bytes()))["agent_ids"][0]
    legacy = await client.get(f"/v1/agents/{agent_id}/export", params={"use_legacy_format": "true"})
    assert legacy.status_code == 422


async def test_a_file_is_imported_whole_as_many_times_as_asked(client: httpx.AsyncClient) -> None:
    first = json_object(await _import(client, SUPPORT_DESK.read_bytes()))["agent_ids"]
    second = json_object(await _import(client, SUPPORT_DESK.read_bytes()))["agent_ids"]
    assert len(set(first + second)) == 4
    blocks = [{b["id"] for b in json_object(await client.get(f"/v1/agents/{i}"))["blocks"]} for i in (*first, *second)]
    assert blocks[0] & blocks[1] and not blocks[0] & blocks[2]  # shared within an import, not across


def _nested(levels: int) -> Any:
    """An object ``levels`` deep: {"a": {"a": ... 1}}."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def _plain(doc: Doc) -> bytes:
    return json.dumps(doc).encode()  # NaN and Infinity as Python writes them, not refused here


def _with(change: Callable[[Doc], None]) -> bytes:
    doc = document(SUPPORT_DESK)
    change(doc)
    return _plain(doc)


# Values the databases or the JSON encoder cannot hold, in what an import would store: each is
# refused, naming its place in the file, as the API refuses it in the same field of a body.
UNSTORABLE_FILES: dict[str, tuple[bytes, str]] = {
    "metadata nested 300 deep": (
        _with(lambda d: _agent(d, 0).update(metadata=_nested(300))),
        "agents.0.metadata.a.a",
    ),
    "an integer past 64 bits": (
        _with(lambda d: _agent(d, 0).update(metadata={"seats": 2**80})),
        "agents.0.metadata.seats: is an integer out of the 64-bit range",
    ),
    "NaN": (
        _with(lambda d: _agent(d, 1).update(metadata={"score": float("nan")})),
        "agents.1.metadata.score: is not a finite number",
    ),
    "Infinity in a block's metadata": (
        _with(lambda d: d["blocks"][0].update(metadata={"weight": float("inf")})),
        "blocks.0.metadata.weight: is not a finite number",
    ),
    "NUL in a metadata key": (
        _with(lambda d: _agent(d, 0).update(metadata={"a\x00b": 1})),
        "agents.0.metadata.'a\\x00b': holds a NUL character",
    ),
    "NUL in a message": (
        _with(lambda d: _agent(d, 0)["messages"][3]["content"][0].update(text="hi\x00")),
        "agents.0.messages.3.content.0.text: holds a NUL character",
    ),
    "lone surrogate in a block": (
        _with(lambda d: d["blocks"][1].update(value="half \ud800 a character")),
        "blocks.1.value: Input should be a valid string",  # pydantic's own refusal, before ours
    ),
    "NUL in a tool's source": (
        _with(lambda d: _tool(d, "escalate").update(source_code=_tool(d, "escalate")["source_code"] + "\x00")),
        "holds a NUL character",
    ),
    "a tag longer than a name": (
        _with(lambda d: _agent(d, 0).update(tags=["t" * 256])),
        "agents.0.tags.0: String should have at most 255 characters",
    ),
    "200,000 brackets": (b"[" * 200_000, "nested more than"),
    "200,000 brackets in an agent": (
        b'{"agents": [{"id": "agent-0", "name": "deep", "metadata": ' + b"[" * 200_000 + b"]}]}",
        "agents.0.metadata.0.0",
    ),
}


@pytest.mark.parametrize("case", UNSTORABLE_FILES)
async def test_what_cannot_be_stored_is_refused_and_the_agents_still_list(client: httpx.AsyncClient, case: str) -> None:
    before = await _counts(client)
    content, expected = UNSTORABLE_FILES[case]

    response = await _import(client, content)

    assert response.status_code == 422, response.text
    assert response.json()["field"] == "file"
    assert expected in response.json()["detail"], response.json()["detail"]
    assert await _counts(client) == before  # nothing written, and every listing still answers


async def test_metadata_as_deep_as_the_api_takes_is_imported_and_one_level_more_is_not(
    client: httpx.AsyncClient,
) -> None:
    # The deepest metadata an agent can be created with through the API...
    created = {
        levels: await client.post(
            "/v1/agents/", json={"name": f"p{levels}", "model": MODEL, "metadata": _nested(levels)}
        )
        for levels in range(60, 70)
    }
    deepest = max(levels for levels, response in created.items() if response.status_code == 200)
    assert created[deepest + 1].status_code == 422
    before = await _counts(client)

    # ... is the deepest an import takes in the same field.
    taken = await _import(client, _with(lambda d: _agent(d, 0).update(metadata=_nested(deepest))))
    refused = await _import(client, _with(lambda d: _agent(d, 0).update(metadata=_nested(deepest + 1))))

    assert taken.status_code == 200, taken.text
    assert refused.status_code == 422, refused.text
    assert "agents.0.metadata" in refused.json()["detail"]
    agent = json_object(await client.get(f"/v1/agents/{taken.json()['agent_ids'][0]}"))
    assert agent["metadata"] == _nested(deepest)
    assert (await _counts(client))[0] == before[0] + 2  # the file's two agents, once
    assert deepest == MAX_JSON_DEPTH - 1  # counted from the body's top, where "metadata" is one level


async def test_a_sleeptime_group_goes_out_and_comes_back_with_its_agents(client: httpx.AsyncClient) -> None:
    main = json_object(
        await client.post(
            "/v1/agents",
            json={
                "name": "pal",
                "model": "anthropic/claude-3-5-haiku-20241022",
                "memory_blocks": [{"label": "human", "value": "Ada"}],
                "enable_sleeptime": True,
            },
        )
    )
    exported = json_object(await client.get(f"/v1/agents/{main['id']}/export"))
    assert [a["name"] for a in exported["agents"]] == ["pal", "pal-sleeptime"]
    (group,) = exported["groups"]
    assert group["manager_config"] == {
        "manager_type": "sleeptime",
        "manager_agent_id": "agent-0",
        "sleeptime_agent_frequency": 5,
    }
    assert group["agent_ids"] == ["agent-1"] and exported["agents"][0]["group_ids"] == [group["id"]]

    imported = json_object(await _import(client, json.dumps(exported).encode()))
    new_main, new_sleeper = imported["agent_ids"]
    again = json_object(await client.get(f"/v1/agents/{new_main}"))
    assert again["enable_sleeptime"] and again["managed_group"]["agent_ids"] == [new_sleeper]
    assert again["managed_group"]["id"] != main["managed_group"]["id"]
    sleeper = json_object(await client.get(f"/v1/agents/{new_sleeper}"))
    assert sleeper["agent_type"] == "sleeptime_agent"
    # The two share their blocks again, as they did.
    assert {b["id"] for b in again["blocks"]} <= {b["id"] for b in sleeper["blocks"]}


async def test_a_groups_shared_blocks_that_the_file_lacks_are_left_out(client: httpx.AsyncClient) -> None:
    """Letta's export writes its own database's ids in a group's shared_block_ids: they name
    nothing here, and the file's own blocks are shared again."""
    body = {
        "name": "pal",
        "model": MODEL,
        "memory_blocks": [{"label": "human", "value": "Ada"}],
        "enable_sleeptime": True,
    }
    main = json_object(await client.post("/v1/agents", json=body))
    exported = json_object(await client.get(f"/v1/agents/{main['id']}/export"))
    (group,) = exported["groups"]
    assert group["shared_block_ids"] == [b["id"] for b in exported["blocks"] if b["label"] == "human"]
    group["shared_block_ids"].append("block-3f1c2a9e-0000-4000-8000-000000000000")
    new_main, _ = json_object(await _import(client, json.dumps(exported).encode()))["agent_ids"]
    again = json_object(await client.get(f"/v1/agents/{new_main}"))
    assert again["managed_group"]["shared_block_ids"] == [b["id"] for b in again["blocks"]]
