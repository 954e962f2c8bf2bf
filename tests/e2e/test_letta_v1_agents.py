"""letta_v1 agents (Letta's current default loop) against a live server and the emulator.

Such an agent's tools go to the model as they are (no ``request_heartbeat``, no
``inner_thoughts``), the model may answer in text (tool choice ``auto``) and that text is its
reply; every tool call's result goes back to the model in another step, without a heartbeat.
Sync through letta-client 1.12.1 (what pip installs today), batch runs through 1.7.0.
"""

from __future__ import annotations

import json
import time
from itertools import islice
from pathlib import Path
from typing import Any

import httpx
import pytest
from letta_client import Letta

from support.agent_files import V1_COMPANION, V1_RESEARCHER, document

LOOKUP_CITY = '''
def lookup_city(city: str) -> str:
    """Look up today's weather in a city.

    Args:
        city: The city's name, such as Paris.
    """
    return f"{city}: 21 C and clear"
'''


def _model_calls(emulator: str) -> list[dict[str, Any]]:
    """What the emulator's model was asked, oldest first."""
    response = httpx.get(f"{emulator.rstrip('/')}/_emulator/model_calls", timeout=30)
    response.raise_for_status()
    calls: list[dict[str, Any]] = response.json()["data"]
    return calls


def _tool_schemas(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The parameter schemas of a request's tools, either provider's."""
    return [t["function"]["parameters"] if "function" in t else t["input_schema"] for t in body.get("tools") or []]


def _choice(body: dict[str, Any]) -> str:
    """A request's tool choice as a word: auto, or required (OpenAI) / any (Anthropic)."""
    choice = body.get("tool_choice")
    return str(choice["type"] if isinstance(choice, dict) else choice)


def _assert_v1_requests(calls: list[dict[str, Any]]) -> None:
    """Every request went as a letta_v1 one: tools without the agent arguments."""
    assert calls
    for call in calls:
        for schema in _tool_schemas(call["body"]):
            assert "request_heartbeat" not in schema.get("properties", {}), schema
            assert "inner_thoughts" not in schema.get("properties", {}), schema


def _import(client: Any, path: Path) -> str:
    (agent_id,) = client.agents.import_file(file=(path.name, path.read_bytes()), append_copy_suffix=False).agent_ids
    return str(agent_id)


def _wait(letta: Letta, run_id: str) -> None:
    deadline = time.monotonic() + 60
    while (current := letta.batches.retrieve(run_id)).status in ("created", "running"):
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    assert current.status == "completed", current


def _last_text(message: Any) -> str:
    """The text of a batch message's last content part."""
    assert message.content, message
    text = message.content[-1].text
    assert isinstance(text, str), message
    return text


@pytest.mark.parametrize("path", [V1_COMPANION, V1_RESEARCHER], ids=lambda p: p.stem)
def test_an_imported_v1_agent_answers_hello_in_text(letta_1_12: Any, emulator: str, path: Path) -> None:
    agent_id = _import(letta_1_12, path)
    agent = letta_1_12.agents.retrieve(agent_id)
    assert agent.agent_type == "letta_v1_agent"
    assert "send_message" not in [t.name for t in agent.tools]

    response = letta_1_12.agents.messages.create(agent_id, messages=[{"role": "user", "content": "hello"}])
    kinds = [m.message_type for m in response.messages]
    assert kinds == ["assistant_message"], kinds
    assert "hello" in response.messages[0].content
    assert response.stop_reason.stop_reason == "end_turn"
    calls = _model_calls(emulator)
    _assert_v1_requests(calls)
    assert [_choice(c["body"]) for c in calls] == ["auto"]
    # No greeting through send_message, no heartbeat: the window is the system message and this exchange.
    roles = [m.message_type for m in letta_1_12.agents.messages.list(agent_id, order="asc")]
    assert roles == ["system_message", "user_message", "assistant_message"], roles


def test_imported_v1_agents_answer_hello_in_a_batch_run(letta: Letta, emulator: str) -> None:
    ids = [_import(letta, path) for path in (V1_COMPANION, V1_RESEARCHER)]
    run = letta.batches.create(
        requests=[{"agent_id": i, "messages": [{"role": "user", "content": "hello"}]} for i in ids]
    )
    _wait(letta, run.id)
    messages = list(islice(letta.batches.messages.list(run.id, order="asc", limit=50), 100))
    for agent_id in ids:
        mine = [m for m in messages if m.agent_id == agent_id]
        assert [m.role for m in mine] == ["user", "assistant"], mine
        assert not mine[1].tool_calls
        assert "hello" in _last_text(mine[1])
    item_calls = [c for c in _model_calls(emulator) if c.get("custom_id")]
    assert len(item_calls) == 2
    _assert_v1_requests(item_calls)
    assert {_choice(c["body"]) for c in item_calls} == {"auto"}


ASK = "Please use lookup_city for Paris, Rome and Oslo"


def test_a_v1_agent_looks_up_three_things_then_answers_in_text(letta_1_12: Any, emulator: str) -> None:
    agent_id = _import(letta_1_12, V1_RESEARCHER)
    response = letta_1_12.agents.messages.create(agent_id, messages=[{"role": "user", "content": ASK}])
    kinds = [m.message_type for m in response.messages]
    # One call per step (the file's model makes no parallel calls), each result back to the model.
    assert kinds == ["tool_call_message", "tool_return_message"] * 3 + ["assistant_message"], kinds
    asked = [
        json.loads(m.tool_call.arguments)["city"] for m in response.messages if m.message_type == "tool_call_message"
    ]
    assert asked == ["Paris", "Rome", "Oslo"]
    answer = response.messages[-1].content
    assert all(f"{city}: 21 C and clear" in answer for city in asked), answer
    assert response.stop_reason.stop_reason == "end_turn"
    assert response.usage.step_count == 4
    calls = _model_calls(emulator)
    _assert_v1_requests(calls)
    assert [_choice(c["body"]) for c in calls] == ["auto"] * 4
    # The steps after a call go on from its result: no heartbeat between them.
    listed = [m.message_type for m in letta_1_12.agents.messages.list(agent_id, order="asc")]
    assert listed.count("user_message") == 1, listed


def test_a_v1_agent_looks_up_three_things_in_a_batch_run(letta: Letta, emulator: str) -> None:
    agent_id = _import(letta, V1_RESEARCHER)
    run = letta.batches.create(requests=[{"agent_id": agent_id, "messages": [{"role": "user", "content": ASK}]}])
    _wait(letta, run.id)
    mine = list(islice(letta.batches.messages.list(run.id, order="asc", limit=50), 100))
    # Four steps: three calls, each answered by its result (no heartbeat), then the text answer.
    assert [m.role for m in mine] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"], [m.role for m in mine]
    assert [m.tool_calls[0].function.name for m in mine if m.role == "assistant" and m.tool_calls] == [
        "lookup_city"
    ] * 3
    assert all(f"{city}: 21 C and clear" in _last_text(mine[-1]) for city in ("Paris", "Rome", "Oslo"))
    retrieved = letta.batches.retrieve(run.id)
    assert retrieved.status == "completed"
    item_calls = [c for c in _model_calls(emulator) if c.get("custom_id")]
    assert len(item_calls) == 4
    _assert_v1_requests(item_calls)


def test_a_tool_rule_that_forces_a_call_forces_it_and_then_lets_the_model_answer(
    letta_1_12: Any, emulator: str
) -> None:
    tool = letta_1_12.tools.create(source_code=LOOKUP_CITY)
    agent = letta_1_12.agents.create(
        name="forced",
        agent_type="letta_v1_agent",
        model="openai/gpt-4o-mini",
        tool_ids=[tool.id],
        tool_rules=[{"type": "run_first", "tool_name": "lookup_city"}],
        memory_blocks=[{"label": "persona", "value": "I check the weather first."}],
    )
    response = letta_1_12.agents.messages.create(agent.id, messages=[{"role": "user", "content": "hello"}])
    kinds = [m.message_type for m in response.messages]
    assert kinds == ["tool_call_message", "tool_return_message", "assistant_message"], kinds
    assert "lookup_city returned" in response.messages[-1].content
    assert response.stop_reason.stop_reason == "end_turn"
    calls = _model_calls(emulator)
    _assert_v1_requests(calls)
    # run_first forces the first call (as Letta does); then the model may answer.
    assert [_choice(c["body"]) for c in calls] == ["required", "auto"]


def test_send_message_still_ends_a_v1_agents_turn(letta_1_12: Any, emulator: str) -> None:
    agent = letta_1_12.agents.create(
        name="sender",
        agent_type="letta_v1_agent",
        model="anthropic/claude-3-5-haiku-20241022",
        tools=["send_message"],
        tool_rules=[{"type": "run_first", "tool_name": "send_message"}],
        memory_blocks=[{"label": "persona", "value": "I speak through send_message."}],
    )
    response = letta_1_12.agents.messages.create(agent.id, messages=[{"role": "user", "content": "hello"}])
    kinds = [m.message_type for m in response.messages]
    # send_message is shown as the assistant's message; its turn ends there, no second step.
    assert kinds == ["assistant_message", "tool_return_message"], kinds
    assert response.stop_reason.stop_reason == "end_turn"
    assert response.usage.step_count == 1
    _assert_v1_requests(_model_calls(emulator))


def test_agent_type_is_kept_through_create_retrieve_list_update_export_and_import(
    letta_1_12: Any, http: httpx.Client
) -> None:
    default = letta_1_12.agents.create(name="plain", model="openai/gpt-4o-mini")
    # Letta 0.16.8's default for a new agent: the letta_v1 loop, its base tools, no greeting.
    assert default.agent_type == "letta_v1_agent"
    assert sorted(t.name for t in default.tools) == ["conversation_search", "memory_insert", "memory_replace"]
    assert len(default.message_ids) == 1
    assert "request_heartbeat" not in default.system and "send_message" not in default.system
    old = letta_1_12.agents.create(name="old", model="openai/gpt-4o-mini", agent_type="memgpt_agent")
    v2 = letta_1_12.agents.create(name="v2", model="openai/gpt-4o-mini", agent_type="memgpt_v2_agent")
    assert (old.agent_type, v2.agent_type) == ("memgpt_agent", "memgpt_v2_agent")
    assert "send_message" in [t.name for t in v2.tools] and len(v2.message_ids) == 4
    assert letta_1_12.agents.retrieve(old.id).agent_type == "memgpt_agent"
    listed = {a.id: a.agent_type for a in letta_1_12.agents.list()}
    assert listed == {default.id: "letta_v1_agent", old.id: "memgpt_agent", v2.id: "memgpt_v2_agent"}

    changed = http.patch(f"/v1/agents/{v2.id}", json={"agent_type": "letta_v1_agent"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["agent_type"] == "letta_v1_agent"

    exported = json.loads(letta_1_12.agents.export_file(old.id))
    assert exported["agents"][0]["agent_type"] == "memgpt_agent"
    again = letta_1_12.agents.import_file(file=("old.af", json.dumps(exported).encode())).agent_ids
    assert letta_1_12.agents.retrieve(again[0]).agent_type == "memgpt_agent"
    v1_back = json.loads(letta_1_12.agents.export_file(default.id))["agents"][0]
    assert v1_back["agent_type"] == "letta_v1_agent"
    assert v1_back["llm_config"]["put_inner_thoughts_in_kwargs"] is False


@pytest.mark.parametrize("agent_type", ["react_agent", "workflow_agent", "voice_convo_agent", "split_thread_agent"])
def test_a_type_nightshift_does_not_run_is_a_422(http: httpx.Client, agent_type: str) -> None:
    created = http.post("/v1/agents/", json={"name": "x", "model": "openai/gpt-4o-mini", "agent_type": agent_type})
    assert created.status_code == 422, created.text
    assert agent_type in created.json()["detail"] and "not supported" in created.json()["detail"]
    assert http.get("/v1/agents/").json() == []
    plain = http.post("/v1/agents/", json={"name": "y", "model": "openai/gpt-4o-mini"}).json()
    updated = http.patch(f"/v1/agents/{plain['id']}", json={"agent_type": agent_type})
    assert updated.status_code == 422, updated.text
    assert http.get(f"/v1/agents/{plain['id']}").json()["agent_type"] == "letta_v1_agent"


def test_an_unknown_type_and_a_file_of_an_unsupported_type_are_422s(http: httpx.Client) -> None:
    created = http.post("/v1/agents/", json={"name": "x", "model": "openai/gpt-4o-mini", "agent_type": "nonsense"})
    assert created.status_code == 422, created.text
    assert "nonsense" in created.json()["detail"] and "letta_v1_agent" in created.json()["detail"]
    doc = document(V1_COMPANION)
    doc["agents"][0]["agent_type"] = "voice_sleeptime_agent"
    imported = http.post(
        "/v1/agents/import", files={"file": ("sleepy.af", json.dumps(doc).encode(), "application/json")}
    )
    assert imported.status_code == 422, imported.text
    assert "voice_sleeptime_agent" in imported.json()["detail"]
    assert http.get("/v1/agents/").json() == []


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-20241022"])
def test_a_v1_agents_answer_streams_in_pieces_as_it_is_stored(letta: Letta, model: str) -> None:
    tool = letta.tools.create(source_code=LOOKUP_CITY)
    agent = letta.agents.create(name="streamer", model=model, tool_ids=[tool.id])
    assert agent.agent_type == "letta_v1_agent"
    ask = "Please use lookup_city for Lima"
    with letta.agents.messages.create(agent.id, input=ask, streaming=True, stream_tokens=True) as stream:
        chunks: list[Any] = list(stream)
    *messages, stop, usage = chunks
    assert stop.stop_reason == "end_turn" and usage.step_count == 2
    listed = [
        m.model_dump(mode="json", exclude_none=True)
        for m in islice(letta.agents.messages.list(agent.id, order="asc", limit=100), 100)
    ][1:]  # after the system message
    assert [m["message_type"] for m in listed] == [
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    # Pieces of one part share the stored message's id; joined, they are that part as stored.
    joined: dict[tuple[str, str], list[Any]] = {}
    for chunk in messages:
        joined.setdefault((chunk.id, str(chunk.message_type)), []).append(chunk)
    assert list(joined) == [(m["id"], m["message_type"]) for m in listed]
    call = listed[1]["tool_call"]
    pieces = joined[(listed[1]["id"], "tool_call_message")]
    assert json.loads("".join(p.tool_call.arguments or "" for p in pieces)) == json.loads(call["arguments"])
    assert json.loads(call["arguments"]) == {"city": "Lima"}
    answer = joined[(listed[3]["id"], "assistant_message")]
    assert "".join(str(p.content) for p in answer) == listed[3]["content"]
    assert "Lima: 21 C and clear" in listed[3]["content"]


def test_a_v1_agent_saves_what_it_is_asked_to_remember_with_memory_insert(letta_1_12: Any) -> None:
    agent_id = _import(letta_1_12, V1_COMPANION)
    response = letta_1_12.agents.messages.create(
        agent_id, messages=[{"role": "user", "content": "Please remember that I like green tea"}]
    )
    kinds = [m.message_type for m in response.messages]
    assert kinds == ["tool_call_message", "tool_return_message", "assistant_message"], kinds
    assert response.messages[0].tool_call.name == "memory_insert"
    assert response.messages[-1].content == "Got it, I have saved that to my memory."
    human = {b.label: b.value for b in letta_1_12.agents.blocks.list(agent_id)}["human"]
    assert human.endswith("I like green tea"), human
