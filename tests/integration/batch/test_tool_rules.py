"""Tool rules in batch stepped: which tools each step offers, and when an agent's loop ends."""

from __future__ import annotations

import pytest

from integration.batch.kit import CHECK_TOOL, call, say, tool_names
from support.api import create_tool
from support.runs import LOOKUP_TOOL
from support.stepped import SteppedRuns


async def test_run_first_then_child_rules_limit_the_tools_offered(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, LOOKUP_TOOL)
    rules = [
        {"type": "run_first", "tool_name": "lookup_order"},
        {"type": "constrain_child_tools", "tool_name": "lookup_order", "children": ["send_message"]},
    ]
    ruled = await stepped.agent("ruled", tools=["lookup_order"], tool_rules=rules)
    free = await stepped.agent("free", tools=["lookup_order"])
    # A child rule continues the loop even without a heartbeat: its children must get their turn.
    stepped.model.script(ruled["id"], call("lookup_order", heartbeat=False, order_id="5"), say("shipped"))
    stepped.model.script(free["id"], say("hi"))
    run = await stepped.start([{"agent_id": a["id"], "input": "order 5?"} for a in (ruled, free)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    first, second = stepped.model.calls(ruled["id"])
    assert tool_names(first) == ["lookup_order"]
    assert tool_names(second) == ["send_message"]
    (unruled,) = stepped.model.calls(free["id"])
    assert len(tool_names(unruled)) > 2
    assert {"lookup_order", "send_message", "core_memory_append"} <= set(tool_names(unruled))


async def test_conditional_rule_follows_the_last_tool_result(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, CHECK_TOOL)
    await create_tool(stepped.client, LOOKUP_TOOL)
    rules = [
        {
            "type": "conditional",
            "tool_name": "check_stock",
            "child_output_mapping": {"in_stock": "send_message", "sold_out": "lookup_order"},
        }
    ]
    lucky = await stepped.agent("lucky", tools=["check_stock", "lookup_order"], tool_rules=rules)
    unlucky = await stepped.agent("unlucky", tools=["check_stock", "lookup_order"], tool_rules=rules)
    stepped.model.script(lucky["id"], call("check_stock", item="apple"), say("in stock"))
    stepped.model.script(
        unlucky["id"], call("check_stock", item="pear"), call("lookup_order", order_id="9"), say("sorry")
    )
    run = await stepped.start([{"agent_id": a["id"], "input": "do you have it?"} for a in (lucky, unlucky)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    lucky_calls = stepped.model.calls(lucky["id"])
    assert len(lucky_calls) == 2
    assert tool_names(lucky_calls[1]) == ["send_message"]
    unlucky_calls = stepped.model.calls(unlucky["id"])
    assert len(unlucky_calls) == 2  # lookup_order without a heartbeat ends the loop
    assert tool_names(unlucky_calls[1]) == ["lookup_order"]


async def test_max_steps_per_request_stops_a_looping_agent(stepped: SteppedRuns) -> None:
    looper = await stepped.agent("looper")
    limited = await stepped.agent("limited")
    loop = [call("conversation_search", heartbeat=True, query=f"q{i}") for i in range(6)]
    stepped.model.script(looper["id"], *loop)
    stepped.model.script(limited["id"], *loop)
    run = await stepped.start(
        [
            {"agent_id": looper["id"], "input": "go", "max_steps": 4},
            {"agent_id": limited["id"], "input": "go", "max_steps": 2},
        ]
    )
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 2
    assert len(stepped.model.calls(looper["id"])) == 4
    assert len(stepped.model.calls(limited["id"])) == 2
    assert [b["step_number"] for b in done["progress"]["provider_batches"]] == [0, 1, 2, 3]


@pytest.mark.settings(default_max_steps=3)
async def test_max_steps_defaults_to_the_setting(stepped: SteppedRuns) -> None:
    looper = await stepped.agent("looper")
    stepped.model.script(looper["id"], *[call("conversation_search", heartbeat=True, query="q") for _ in range(6)])
    run = await stepped.start([{"agent_id": looper["id"], "input": "go"}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert len(stepped.model.calls(looper["id"])) == 3


async def test_max_count_rule_takes_a_used_tool_away(stepped: SteppedRuns) -> None:
    rules = [{"type": "max_count_per_step", "tool_name": "conversation_search", "max_count_limit": 1}]
    counted = await stepped.agent("counted", tool_rules=rules)
    stepped.model.script(counted["id"], call("conversation_search", heartbeat=True, query="q"), say("done"))
    run = await stepped.start([{"agent_id": counted["id"], "input": "go"}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    first, second = stepped.model.calls(counted["id"])
    assert "conversation_search" in tool_names(first)
    assert "conversation_search" not in tool_names(second)


async def test_a_call_the_rules_refuse_leaves_the_rules_in_force(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, LOOKUP_TOOL)
    rules = [{"type": "run_first", "tool_name": "lookup_order"}]
    agent = await stepped.agent("impatient", tools=["lookup_order"], tool_rules=rules)
    # The model answers with a tool the rules do not allow yet: a tool error, and run_first still holds.
    stepped.model.script(agent["id"], say("hi!"), call("lookup_order", order_id="3"))
    run = await stepped.start([{"agent_id": agent["id"], "input": "order 3?"}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    messages = await stepped.messages(run["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert "not allowed at this step" in messages[2]["content"][0]["text"]
    first, second = stepped.model.calls(agent["id"])
    assert tool_names(first) == ["lookup_order"]
    assert tool_names(second) == ["lookup_order"]
