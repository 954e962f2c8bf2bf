"""Batch runs step letta_v1 agents as synchronous sends do, pass by pass: an agent that called a
tool is in the next step with its result (no heartbeat), one that answered in text is done."""

from __future__ import annotations

from nightshift.domain.messages import MessageKind, Role
from support.api import create_tool
from support.runs import LOOKUP_TOOL, OPENAI_MODEL
from support.stepped import SteppedRuns


async def test_a_v1_agent_that_called_a_tool_is_in_the_next_step_and_one_that_answered_is_done(
    stepped: SteppedRuns,
) -> None:
    tool = await create_tool(stepped.client, LOOKUP_TOOL)
    greeter = await stepped.agent("greeter", agent_type="letta_v1_agent", tool_ids=[tool["id"]])
    looker = await stepped.agent("looker", model=OPENAI_MODEL, agent_type="letta_v1_agent", tool_ids=[tool["id"]])
    memgpt = await stepped.agent("memgpt", tool_ids=[tool["id"]])
    run = await stepped.start(
        [
            {"agent_id": greeter["id"], "input": "hello"},
            {"agent_id": looker["id"], "input": "Please use lookup_order for A-17"},
            {"agent_id": memgpt["id"], "input": "hello"},
        ]
    )
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    (greeted,) = stepped.model.requests(greeter["id"])
    assert (greeted.require_tool_call, greeted.agent_arguments) == (False, False)
    first, second = stepped.model.requests(looker["id"])
    assert not first.require_tool_call and not second.require_tool_call
    # The second step goes on from the call's result: the last message the model sees is it.
    assert second.messages[-1].role is Role.TOOL and "order A-17 shipped" in second.messages[-1].text
    assert all(m.kind is not MessageKind.HEARTBEAT for m in second.messages)
    # A memgpt agent of the same run is as it was: a forced call with the agent arguments.
    (forced,) = stepped.model.requests(memgpt["id"])
    assert (forced.require_tool_call, forced.agent_arguments) == (True, True)

    messages = await stepped.messages(run["id"])
    mine = [m for m in messages if m["agent_id"] == looker["id"]]
    assert [m["role"] for m in mine] == ["user", "assistant", "tool", "assistant"]
    assert not mine[-1]["tool_calls"] and "order A-17 shipped" in mine[-1]["content"][-1]["text"]
    greeting = [m for m in messages if m["agent_id"] == greeter["id"]]
    assert [m["role"] for m in greeting] == ["user", "assistant"]
    assert "hello" in greeting[-1]["content"][-1]["text"]
