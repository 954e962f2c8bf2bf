"""letta-client 1.7.0 ``batches.*`` and ``agents.messages.create`` against a real server and the emulator."""

from __future__ import annotations

import time
from itertools import islice

from letta_client import Letta

from support.runs import LOOKUP_TOOL

MODEL = "anthropic/claude-3-5-haiku-20241022"


def test_batches_and_synchronous_messages(letta: Letta) -> None:
    tool = letta.tools.create(source_code=LOOKUP_TOOL)
    agents = [
        letta.agents.create(
            agent_type="memgpt_v2_agent",
            name=f"clerk-{i}",
            model=MODEL,
            tool_ids=[tool.id],
            memory_blocks=[{"label": "human", "value": "?"}],
        )
        for i in range(3)
    ]
    run = letta.batches.create(
        requests=[
            {"agent_id": a.id, "messages": [{"role": "user", "content": "Please use lookup_order for A-17"}]}
            for a in agents
        ]
    )
    assert run.id.startswith("batch-")
    deadline = time.monotonic() + 30
    while (current := letta.batches.retrieve(run.id)).status in ("created", "running"):
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    assert current.status == "completed"
    assert current.completed_at is not None
    assert run.id in [r.id for r in islice(letta.batches.list(), 100)]

    messages = list(islice(letta.batches.messages.list(run.id, order="asc", limit=4), 100))
    assert len(messages) == 3 * 6  # user, assistant+tool (lookup), heartbeat, assistant+tool (send_message)
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    mine = [m for m in messages if m.agent_id == agents[0].id]
    assert [m.role for m in mine] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    calls = [m.tool_calls[0].function.name for m in mine if m.role == "assistant" and m.tool_calls]
    assert calls == ["lookup_order", "send_message"]
    assert all(m.batch_item_id for m in mine)
    only_one = list(islice(letta.batches.messages.list(run.id, agent_id=agents[1].id), 100))
    assert {m.agent_id for m in only_one} == {agents[1].id}

    # A cancelled run that has ended stays as it was.
    letta.batches.cancel(run.id)
    assert letta.batches.retrieve(run.id).status == "completed"

    response = letta.agents.messages.create(
        agent_id=agents[0].id, messages=[{"role": "user", "content": "Please use lookup_order for B-2"}]
    )
    types = [m.message_type for m in response.messages]
    assert types[0] == "reasoning_message" and "user_message" not in types
    assert "tool_call_message" in types and "tool_return_message" in types and "assistant_message" in types
    assert response.stop_reason.stop_reason == "end_turn"
    assert response.usage.step_count == 2
    assert response.usage.completion_tokens and response.usage.prompt_tokens
