"""Several tool calls in one model turn, through the real API: batch runs and synchronous steps.

The emulator checks every request as the providers do (each call answered by its own result, in
the turn right after it), so a run that goes on after a turn of three calls shows that the next
request answered all three.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from integration.batch.kit import by_agent, conversation, say, text_of
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from support.api import create_tool, json_object
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL
from support.stepped import SteppedRuns

WEATHER_TOOL = '''
def get_weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    if city == "Atlantis":
        raise LookupError(f"no weather station in {city}")
    return f"{city}: sunny"
'''
MODELS = pytest.mark.parametrize("model", [ANTHROPIC_MODEL, OPENAI_MODEL])
THREE_CITIES = "Look up the weather in Paris, Rome and Oslo with get_weather and tell me."


def three_lookups(*cities: str) -> ScriptedReply:
    """One turn of one get_weather call per city, each asking for another turn."""
    return ScriptedReply(
        tool_calls=[
            ScriptedToolCall(
                name="get_weather", arguments={"city": c}, inner_thoughts=f"{c} next.", request_heartbeat=True
            )
            for c in cities
        ]
    )


def tool_bodies(messages: list[dict[str, Any]], agent_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The agent's tool messages as (tool_call_id, decoded body), in order."""
    return [
        (m["tool_call_id"], json.loads(text_of(m)))
        for m in messages
        if m["agent_id"] == agent_id and m["role"] == "tool"
    ]


def allows_parallel_calls(body: dict[str, Any]) -> bool:
    """Whether a provider request let the model call several tools."""
    if (
        "tool_choice" in body
        and isinstance(body["tool_choice"], dict)
        and "disable_parallel_tool_use" in body["tool_choice"]
    ):
        return body["tool_choice"]["disable_parallel_tool_use"] is False
    return body["parallel_tool_calls"] is True


@MODELS
async def test_a_turn_of_three_calls_one_failing_is_stored_and_answered_in_a_batch_run(
    stepped: SteppedRuns, model: str
) -> None:
    await create_tool(stepped.client, WEATHER_TOOL)
    agent = await stepped.agent("forecaster", model=model, tools=["get_weather"])
    stepped.model.script(agent["id"], three_lookups("Paris", "Atlantis", "Oslo"), say("Paris and Oslo are sunny."))
    run = await stepped.start([{"agent_id": agent["id"], "input": "weather in Paris, Atlantis and Oslo?"}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    messages = await stepped.messages(run["id"])
    assert by_agent(messages)[agent["id"]] == ["user", "assistant", "tool", "tool", "tool", "user", "assistant", "tool"]
    turn = messages[1]
    assert [json.loads(c["function"]["arguments"]) for c in turn["tool_calls"]] == [
        {"city": "Paris"},
        {"city": "Atlantis"},
        {"city": "Oslo"},
    ]
    results = tool_bodies(messages, agent["id"])[:3]
    assert [call_id for call_id, _ in results] == [c["id"] for c in turn["tool_calls"]]
    assert [(b["status"], b["message"]) for _, b in results] == [
        ("OK", "Paris: sunny"),
        ("Failed", "Error executing function get_weather: LookupError: no weather station in Atlantis"),
        ("OK", "Oslo: sunny"),
    ]

    first, second = stepped.model.calls(agent["id"])
    assert allows_parallel_calls(first)
    seen = "\n".join(conversation(second))
    assert "Paris: sunny" in seen and "no weather station in Atlantis" in seen and "Oslo: sunny" in seen


@MODELS
async def test_a_turn_of_three_calls_one_failing_in_a_synchronous_step(stepped: SteppedRuns, model: str) -> None:
    await create_tool(stepped.client, WEATHER_TOOL)
    agent = await stepped.agent("sync-forecaster", model=model, tools=["get_weather"])
    stepped.model.script("*", three_lookups("Paris", "Atlantis", "Oslo"), say("Paris and Oslo are sunny."))
    response = await stepped.client.post(f"/v1/agents/{agent['id']}/messages", json={"input": "weather?"})
    body = json_object(response)

    assert body["usage"]["step_count"] == 2
    # The new messages only: not the input, not the heartbeat.
    kinds = [m["message_type"] for m in body["messages"]]
    assert kinds[:7] == ["reasoning_message", *["tool_call_message"] * 3, *["tool_return_message"] * 3]
    assert kinds[7:] == ["reasoning_message", "assistant_message", "tool_return_message"]
    calls = [m["tool_call"] for m in body["messages"][1:4]]
    returns = body["messages"][4:7]
    assert [r["tool_call_id"] for r in returns] == [c["tool_call_id"] for c in calls]
    assert [r["status"] for r in returns] == ["success", "error", "success"]
    assert body["messages"][0]["reasoning"] == "Paris next.\nAtlantis next.\nOslo next."
    assert body["messages"][8]["content"] == "Paris and Oslo are sunny."


async def test_the_rules_judge_each_call_of_a_turn(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, WEATHER_TOOL)
    rules = [{"type": "max_count_per_step", "tool_name": "get_weather", "max_count_limit": 2}]
    agent = await stepped.agent("rationed", tools=["get_weather"], tool_rules=rules)
    stepped.model.script(agent["id"], three_lookups("Paris", "Rome", "Oslo"), say("Two of three."))
    run = await stepped.start([{"agent_id": agent["id"], "input": THREE_CITIES}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    bodies = [b for _, b in tool_bodies(await stepped.messages(run["id"]), agent["id"])]
    assert [b["status"] for b in bodies] == ["OK", "OK", "Failed", "OK"]
    assert "not allowed after the calls before it in this turn" in bodies[2]["message"]
    _, second = stepped.model.calls(agent["id"])
    assert "get_weather" not in [t.get("name") for t in second["tools"]]  # used up by the turn's two calls


async def test_the_emulators_model_looks_up_three_cities_in_two_rounds_or_four_one_by_one(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, WEATHER_TOOL)
    parallel = await stepped.agent("parallel", tools=["get_weather"])
    serial = await stepped.agent(
        "serial", tools=["get_weather"], llm_config={"model": ANTHROPIC_MODEL, "parallel_tool_calls": False}
    )
    assert (parallel["llm_config"]["parallel_tool_calls"], serial["llm_config"]["parallel_tool_calls"]) == (True, False)
    run = await stepped.start([{"agent_id": a["id"], "input": THREE_CITIES} for a in (parallel, serial)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    assert len(stepped.model.calls(parallel["id"])) == 2
    serial_calls = stepped.model.calls(serial["id"])
    assert len(serial_calls) == 4
    assert not any(allows_parallel_calls(body) for body in serial_calls)
    said = {m["agent_id"]: m for m in await stepped.messages(run["id"]) if m["role"] == "assistant"}
    for agent in (parallel, serial):
        (call,) = said[agent["id"]]["tool_calls"]
        message = json.loads(call["function"]["arguments"])["message"]
        assert "Paris: sunny" in message and "Rome: sunny" in message and "Oslo: sunny" in message


async def test_send_message_with_other_calls_ends_the_run_in_the_same_round(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("note-taker")
    run = await stepped.start(
        [{"agent_id": agent["id"], "input": "Please remember: my name is Ada; I live in Lyon; I like green tea."}]
    )
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    assert len(stepped.model.calls(agent["id"])) == 1
    messages = await stepped.messages(run["id"])
    assert [c["function"]["name"] for c in messages[1]["tool_calls"]] == ["core_memory_append"] * 3 + ["send_message"]
    assert by_agent(messages)[agent["id"]] == ["user", "assistant", "tool", "tool", "tool", "tool"]
    human = json_object(await stepped.client.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human"))
    assert human["value"] == "Nothing known yet.\nmy name is Ada\nI live in Lyon\nI like green tea"


async def test_parallel_tool_calls_is_kept_by_an_update_that_does_not_name_it(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("toggled", llm_config={"model": ANTHROPIC_MODEL, "parallel_tool_calls": False})
    path = f"/v1/agents/{agent['id']}"
    renamed = json_object(await stepped.client.patch(path, json={"model": OPENAI_MODEL}))
    assert (renamed["model"], renamed["llm_config"]["parallel_tool_calls"]) == (OPENAI_MODEL, False)
    on = json_object(
        await stepped.client.patch(path, json={"llm_config": {"model": OPENAI_MODEL, "parallel_tool_calls": True}})
    )
    assert on["llm_config"]["parallel_tool_calls"] is True
    assert json_object(await stepped.client.get(path))["llm_config"]["parallel_tool_calls"] is True
