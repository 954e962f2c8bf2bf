"""The letta_v1 loop with plain values: its step decisions, the tool rules that force a call, and
the provider requests its agents make (tools as they are, tool choice auto)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nightshift.domain.agents import AgentType, check_agent_type
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.domain.solver import Reason, ToolRulesSolver
from nightshift.domain.tool_rules import (
    ChildToolRule,
    ConditionalToolRule,
    ContinueToolRule,
    InitToolRule,
    RequiredBeforeExitToolRule,
    TerminalToolRule,
)
from nightshift.errors import InvalidInput
from nightshift.providers.anthropic import wire as anthropic_wire
from nightshift.providers.base import ModelRequest
from nightshift.providers.openai import wire as openai_wire
from nightshift.runtime.context import heartbeat_message
from unit.test_step import NOW, ORG, TableSandbox, agent, answer, ok, take, turn

V1 = {"agent_type": AgentType.LETTA_V1}


async def test_a_call_goes_on_to_its_result_without_a_heartbeat() -> None:
    (result,) = await take([turn(answer("conversation_search", '{"query": "tea"}'), agent(**V1))])

    assert (result.continues, result.reason) == (True, "tool_result")
    assert result.heartbeat is False
    assert [m.role for m in result.messages] == [Role.ASSISTANT, Role.TOOL]


async def test_a_text_answer_ends_the_turn() -> None:
    (result,) = await take([turn(answer(None, text="Here you are."), agent(**V1))])

    assert (result.continues, result.reason) == (False, "final_text")


async def test_send_message_alone_is_the_answer() -> None:
    (result,) = await take([turn(answer("send_message", '{"message": "hi"}'), agent(**V1))])

    assert (result.continues, result.reason) == (False, "sent_message")


async def test_exit_loop_and_the_step_limit_end_it() -> None:
    done = agent(**V1, tool_rules=(TerminalToolRule(tool_name="lookup"),))
    (ended,) = await take([turn(answer("lookup"), done)], TableSandbox({"lookup": ok("x")}))
    assert (ended.continues, ended.reason) == (False, Reason.EXIT_LOOP)
    (limited,) = await take([turn(answer("lookup"), agent(**V1), step=9)], TableSandbox({"lookup": ok("x")}))
    assert (limited.continues, limited.reason) == (False, "max_steps")


async def test_a_text_answer_before_a_required_tool_goes_on_with_a_heartbeat() -> None:
    held = agent(**V1, tool_rules=(RequiredBeforeExitToolRule(tool_name="lookup"),))
    (result,) = await take([turn(answer(None, text="Done?"), held)])

    assert (result.continues, result.reason) == (True, Reason.REQUIRED_BEFORE_EXIT)
    assert result.heartbeat is True  # no tool result to go on from: the model is told why


async def test_a_memgpt_agent_is_as_it_was() -> None:
    (result,) = await take([turn(answer("conversation_search", '{"query": "tea"}'))])

    assert (result.continues, result.reason) == (False, Reason.NO_HEARTBEAT)
    (beat,) = await take([turn(answer("conversation_search", '{"query": "tea"}', heartbeat=True))])
    assert (beat.continues, beat.reason, beat.heartbeat) == (True, Reason.HEARTBEAT, True)


def test_the_rules_that_force_a_call() -> None:
    assert not ToolRulesSolver([]).forces_call()
    assert not ToolRulesSolver([TerminalToolRule(tool_name="a")]).forces_call()
    first = ToolRulesSolver([InitToolRule(tool_name="a"), ContinueToolRule(tool_name="a")])
    assert first.forces_call()
    assert not first.register("a", "done").forces_call()
    child = ToolRulesSolver([ChildToolRule(tool_name="a", children=["b"])])
    assert not child.forces_call() and child.register("a", None).forces_call()
    assert not child.register("a", None).register("b", None).forces_call()
    conditional = ToolRulesSolver([ConditionalToolRule(tool_name="a", default_child="b", child_output_mapping={})])
    assert conditional.register("a", "x").forces_call()


def test_supported_types_and_the_others() -> None:
    assert check_agent_type("letta_v1_agent") is AgentType.LETTA_V1
    assert check_agent_type("memgpt_agent").heartbeats and not AgentType.LETTA_V1.heartbeats
    assert check_agent_type("sleeptime_agent") is AgentType.SLEEPTIME  # (made with its main agent, or alone)
    for name in ("react_agent", "workflow_agent", "voice_sleeptime_agent", "nope"):
        with pytest.raises(InvalidInput, match=name):
            check_agent_type(name)


LOOKUP: dict[str, Any] = {
    "name": "lookup",
    "description": "Look it up.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}
PAST = (
    Message(id="m1", organization_id=ORG, agent_id="a", role=Role.USER, text="find tea", created_at=NOW),
    Message(
        id="m2",
        organization_id=ORG,
        agent_id="a",
        role=Role.ASSISTANT,
        text="",
        reasoning="I should look.",
        tool_calls=(ToolCall(id="call_1", name="lookup", arguments='{"q": "tea"}'),),
        created_at=NOW,
    ),
    Message(
        id="m3", organization_id=ORG, agent_id="a", role=Role.TOOL, text="green", tool_call_id="call_1", created_at=NOW
    ),
)


def _request(agent_arguments: bool) -> ModelRequest:
    return ModelRequest(
        model="m",
        system="s",
        messages=PAST,
        tools=(LOOKUP,),
        require_tool_call=agent_arguments,
        agent_arguments=agent_arguments,
    )


def test_openai_requests_of_a_v1_agent_carry_the_tools_as_they_are() -> None:
    body = openai_wire.build_request(_request(False))
    assert body["tools"][0]["function"]["parameters"] == LOOKUP["parameters"]
    assert body["tool_choice"] == "auto"
    call = body["messages"][2]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"q": "tea"}'  # past reasoning is not put back into arguments
    memgpt = openai_wire.build_request(_request(True))
    assert "request_heartbeat" in memgpt["tools"][0]["function"]["parameters"]["properties"]
    assert memgpt["tool_choice"] == "required"
    assert "inner_thoughts" in memgpt["messages"][2]["tool_calls"][0]["function"]["arguments"]


def test_anthropic_requests_of_a_v1_agent_carry_the_tools_as_they_are() -> None:
    params = anthropic_wire.build_request(_request(False))
    assert params["tools"][0]["input_schema"] == LOOKUP["parameters"]
    assert params["tool_choice"]["type"] == "auto"
    (use,) = [b for m in params["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert use["input"] == {"q": "tea"}
    memgpt = anthropic_wire.build_request(_request(True))
    assert "request_heartbeat" in memgpt["tools"][0]["input_schema"]["properties"]
    assert memgpt["tool_choice"]["type"] == "any"


def test_the_providers_own_reasoning_is_kept() -> None:
    anthropic = anthropic_wire.parse_message(
        {
            "content": [
                {"type": "thinking", "thinking": "The user greets me.", "signature": "sig"},
                {"type": "text", "text": "Hello!"},
            ],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 2},
        }
    )
    assert (anthropic.reasoning, anthropic.text) == ("The user greets me.", "Hello!")
    openai = openai_wire.parse_completion(
        {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
                    "finish_reason": "stop",
                }
            ]
        }
    )
    assert (openai.reasoning, openai.text) == ("A greeting.", "Hello!")
    streamed = openai_wire.StreamAssembler()
    for piece in ({"reasoning_content": "A "}, {"reasoning_content": "greeting."}, {"content": "Hi"}):
        streamed.feed({"choices": [{"index": 0, "delta": piece}]})
    assert (streamed.response().reasoning, streamed.response().text) == ("A greeting.", "Hi")


def test_the_turn_a_rule_gives_a_v1_agent_says_nothing_of_heartbeats() -> None:
    v1 = json.loads(heartbeat_message(agent(**V1), NOW).text)
    memgpt = json.loads(heartbeat_message(agent(), NOW).text)

    assert v1["type"] == memgpt["type"] == "heartbeat"
    assert "request_heartbeat" in memgpt["reason"]
    assert "heartbeat" not in v1["reason"] and "rules require" in v1["reason"]
