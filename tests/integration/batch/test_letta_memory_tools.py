"""Letta's newer memory tools (memory_insert, memory_replace, memory_rethink, memory_finish_edits and
the single ``memory`` tool) edit an agent's blocks in a synchronous step and in a batch run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from integration.batch.kit import call, say, system_text
from nightshift.emulator.config import ScriptedReply
from support.api import json_object
from support.stepped import SteppedRuns

MEMORY_TOOLS = ["memory_insert", "memory_replace", "memory_rethink", "memory_finish_edits", "memory"]
MODES = ["sync", "batch"]


async def _agent(stepped: SteppedRuns) -> dict[str, Any]:
    return await stepped.agent(
        "keeper",
        tools=MEMORY_TOOLS,
        memory_blocks=[
            {"label": "persona", "value": "I keep notes.", "limit": 500},
            {"label": "human", "value": "Name: Ada\nLikes: tea", "limit": 500},
        ],
    )


async def _step(stepped: SteppedRuns, agent: dict[str, Any], mode: str, *replies: ScriptedReply) -> None:
    """Script the replies, then step the agent once through the normal API or in a batch run."""
    if mode == "sync":
        stepped.model.script("*", *replies)
        response = await stepped.client.post(
            f"/v1/agents/{agent['id']}/messages", json={"messages": [{"role": "user", "content": "tidy your memory"}]}
        )
        assert response.status_code == 200, response.text
        return
    stepped.model.script(agent["id"], *replies)
    run = await stepped.start([{"agent_id": agent["id"], "input": "tidy your memory"}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done


async def _tool_returns(stepped: SteppedRuns, agent_id: str) -> list[dict[str, Any]]:
    """The agent's tool returns since the user's message, as Letta shows them, ``message`` decoded."""
    context = await stepped.context(agent_id)
    start = next(
        i for i, m in enumerate(context) if m["message_type"] == "user_message" and "tidy your memory" in m["content"]
    )
    found = []
    for message in context[start:]:
        if message["message_type"] == "tool_return_message":
            found.append({**message, "body": json.loads(message["tool_return"])})
    return found


async def _blocks(stepped: SteppedRuns, agent_id: str) -> dict[str, dict[str, Any]]:
    agent = json_object(await stepped.client.get(f"/v1/agents/{agent_id}"))
    return {b["label"]: b for b in agent["blocks"]}


def _last_system_prompt(stepped: SteppedRuns, agent_id: str, mode: str) -> str:
    asked = None if mode == "sync" else agent_id
    bodies = [c["body"] for c in stepped.model.batch_calls() if c["custom_id"] == asked]
    return system_text(bodies[-1])


@pytest.mark.parametrize("mode", MODES)
async def test_each_memory_tool_edits_the_blocks(stepped: SteppedRuns, mode: str) -> None:
    agent = await _agent(stepped)
    await _step(
        stepped,
        agent,
        mode,
        call("memory_replace", heartbeat=True, label="human", old_str="Likes: tea", new_str="Likes: coffee"),
        call("memory_insert", heartbeat=True, label="human", new_str="City: Oslo", insert_line=1),
        call(
            "memory",
            heartbeat=True,
            command="str_replace",
            path="/memories/human",
            old_string="Ada",
            new_string="Ada L.",
        ),
        call("memory", heartbeat=True, command="insert", path="/memories/human", insert_text="Pets: none"),
        call(
            "memory",
            heartbeat=True,
            command="rename",
            old_path="/memories/persona",
            new_path="/memories/self",
            description="Who I am",
        ),
        call("memory_rethink", heartbeat=True, label="self", new_memory="I am a careful helper."),
        call("memory_finish_edits", heartbeat=True),
        say("Memory tidied."),
    )

    blocks = await _blocks(stepped, agent["id"])
    assert set(blocks) == {"human", "self"}
    assert blocks["human"]["value"] == "Name: Ada L.\nCity: Oslo\nLikes: coffee\nPets: none"
    assert (blocks["self"]["value"], blocks["self"]["description"]) == ("I am a careful helper.", "Who I am")
    returns = await _tool_returns(stepped, agent["id"])
    assert [(r["name"], r["status"]) for r in returns] == [
        *((name, "success") for name in ("memory_replace", "memory_insert", "memory", "memory", "memory")),
        ("memory_rethink", "success"),
        ("memory_finish_edits", "success"),
        ("send_message", "success"),
    ]
    assert "'human' was edited" in returns[0]["body"]["message"]
    # The model's last request showed the memory as the edits left it.
    prompt = _last_system_prompt(stepped, agent["id"], mode)
    assert "Name: Ada L.\nCity: Oslo\nLikes: coffee\nPets: none" in prompt
    assert "I am a careful helper." in prompt and "I keep notes." not in prompt


@pytest.mark.parametrize("mode", MODES)
async def test_refused_memory_edits_are_tool_errors_and_change_nothing(stepped: SteppedRuns, mode: str) -> None:
    agent = await _agent(stepped)
    await _step(
        stepped,
        agent,
        mode,
        call("memory_replace", heartbeat=True, label="human", old_str="Likes: juice", new_str="x"),
        call("memory_insert", heartbeat=True, label="human", new_str="x", insert_line=9),
        call("memory_rethink", heartbeat=True, label="human", new_memory="y" * 501),
        call("memory", heartbeat=True, command="create", path="/memories/plans", file_text="x"),
        call("memory", heartbeat=True, command="str_replace", path="/memories/nowhere", old_string="a", new_string="b"),
        call("memory_replace", heartbeat=True, label="human", old_str="a", new_str="Line 1: b"),
        say("I could not change anything."),
    )

    blocks = await _blocks(stepped, agent["id"])
    assert blocks["human"]["value"] == "Name: Ada\nLikes: tea"
    assert blocks["persona"]["value"] == "I keep notes."
    errors = [(r["status"], r["body"]["message"]) for r in await _tool_returns(stepped, agent["id"])][:-1]
    assert all(status == "error" for status, _ in errors), errors
    texts = [text for _, text in errors]
    assert texts[0].startswith("Error executing function memory_replace: nothing was replaced"), texts
    assert texts[1].startswith("Error executing function memory_insert: insert_line 9 is outside"), texts
    assert "over its limit of 500" in texts[2]
    assert texts[3].startswith("Error executing function memory: the create command is not available"), texts
    assert "no memory block labelled 'nowhere'" in texts[4]
    assert "line number prefix" in texts[5]


async def test_the_new_memory_tools_are_base_tools_attached_by_name(stepped: SteppedRuns) -> None:
    plain = await stepped.agent("plain")
    assert not {t["name"] for t in plain["tools"]} & set(MEMORY_TOOLS)
    agent = await _agent(stepped)
    tools = {t["name"]: t for t in agent["tools"]}
    assert set(MEMORY_TOOLS) <= set(tools)
    assert {tools[name]["tool_type"] for name in MEMORY_TOOLS} == {"letta_memory_core"}
    memory = tools["memory"]["json_schema"]["parameters"]
    assert memory["required"] == ["command"]
    assert set(memory["properties"]["command"]["enum"]) == {"create", "str_replace", "insert", "delete", "rename"}
    insert = tools["memory_insert"]["json_schema"]["parameters"]
    assert insert["properties"]["insert_line"]["default"] == -1
    assert insert["required"] == ["label", "new_str"]
