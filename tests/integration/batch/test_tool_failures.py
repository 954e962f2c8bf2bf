"""Answers that cannot run as asked: the agent gets a tool error message and the run goes on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from integration.batch.kit import (
    RAISING_TOOL,
    SLOW_TOOL,
    by_agent,
    call,
    conversation,
    say,
    text_of,
)
from nightshift.emulator.config import ScriptedReply
from support.api import create_tool
from support.runs import LOOKUP_TOOL, OPENAI_MODEL
from support.stepped import SteppedRuns


def _tool_error(messages: list[dict[str, Any]], agent_id: str) -> dict[str, Any]:
    """The first tool message of the agent, which must be an error; returns its decoded body."""
    tool = next(m for m in messages if m["agent_id"] == agent_id and m["role"] == "tool")
    body: dict[str, Any] = json.loads(text_of(tool))
    assert body["status"] == "Failed", body
    return body


async def _run_and_check_error(
    stepped: SteppedRuns, agent: dict[str, Any], first: ScriptedReply, expected: str
) -> None:
    """Run the agent next to a healthy one; the agent's first answer must end in a tool error
    naming ``expected``, after which it gets another step and finishes."""
    healthy = await stepped.agent("healthy")
    stepped.model.script(agent["id"], first, say("sorry, that failed"))
    stepped.model.script(healthy["id"], say("all good"))
    run = await stepped.start([{"agent_id": a["id"], "input": "look up order 12"} for a in (agent, healthy)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 0, "cancelled": 0}
    messages = await stepped.messages(run["id"])
    assert by_agent(messages) == {
        agent["id"]: ["user", "assistant", "tool", "user", "assistant", "tool"],
        healthy["id"]: ["user", "assistant", "tool"],
    }
    error = _tool_error(messages, agent["id"])
    assert expected in error["message"], error
    # The model saw the error in its next step, and the tool message answers the call it made.
    _, second = stepped.model.calls(agent["id"])
    assert expected in "\n".join(conversation(second))


async def test_unknown_tool(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("confused")
    await _run_and_check_error(stepped, agent, call("teleport", destination="Mars"), "unknown tool 'teleport'")


async def test_custom_tool_that_raises(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, RAISING_TOOL)
    agent = await stepped.agent("unlucky", tools=["flaky_lookup"])
    await _run_and_check_error(stepped, agent, call("flaky_lookup", order_id="12"), "order database unreachable for 12")


async def test_custom_tool_called_with_wrong_arguments(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, LOOKUP_TOOL)
    agent = await stepped.agent("sloppy", tools=["lookup_order"])
    await _run_and_check_error(stepped, agent, call("lookup_order", order="12"), "unexpected keyword argument 'order'")


@pytest.mark.settings(tool_timeout_seconds=0.5)
async def test_custom_tool_that_times_out(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, SLOW_TOOL)
    agent = await stepped.agent("patient", tools=["slow_lookup"])
    await _run_and_check_error(stepped, agent, call("slow_lookup", order_id="12"), "timed out after 0.5 s")


async def test_malformed_arguments(stepped: SteppedRuns) -> None:
    # The emulator writes scripted arguments as a JSON object; an OpenAI answer cut off by
    # max_tokens is the one way it produces arguments that are not valid JSON.
    agent = await stepped.agent("cut-off", model=OPENAI_MODEL, max_tokens=40)
    long_message = "word " * 200
    stepped.model.script(agent["id"], say(long_message), ScriptedReply(text="ok"))
    run = await stepped.start([{"agent_id": agent["id"], "input": "talk to me"}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    messages = await stepped.messages(run["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    error = _tool_error(messages, agent["id"])
    assert "not a valid JSON object" in error["message"], error
    assert text_of(messages[-1]) == "ok"


async def test_a_text_answer_is_the_agents_final_word(stepped: SteppedRuns) -> None:
    # DESIGN.md: a text-only answer counts as a final message (no tool error, no next step).
    talker = await stepped.agent("talker")
    other = await stepped.agent("other")
    stepped.model.script(talker["id"], ScriptedReply(text="Just some words, no tool."))
    stepped.model.script(other["id"], call("conversation_search", heartbeat=True, query="x"), say("done"))
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in (talker, other)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 2
    messages = await stepped.messages(run["id"])
    assert by_agent(messages) == {
        talker["id"]: ["user", "assistant"],
        other["id"]: ["user", "assistant", "tool", "user", "assistant", "tool"],
    }
    answer = [m for m in messages if m["agent_id"] == talker["id"]][-1]
    assert text_of(answer) == "Just some words, no tool."
    assert answer["tool_calls"] == []
