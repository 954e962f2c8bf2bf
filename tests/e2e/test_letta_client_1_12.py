"""letta-client 1.12.1, what ``pip install letta-client`` gives today, against a real server:
the calls a new user makes first work, and its missing batches are missing (``nightshift.client``
and letta-client 1.7.0 cover them)."""

from __future__ import annotations

from typing import Any

MODEL = "openai/gpt-4o-mini"


def test_a_new_user_makes_an_agent_and_talks_to_it(letta_1_12: Any) -> None:
    agent = letta_1_12.agents.create(
        name="first",
        model=MODEL,
        memory_blocks=[{"label": "human", "value": "Name: Ada"}, {"label": "persona", "value": "A helper."}],
    )
    assert agent.id.startswith("agent-")
    listed = [a.id for a in letta_1_12.agents.list()]
    assert listed == [agent.id]
    blocks = {b.label: b.value for b in letta_1_12.agents.blocks.list(agent.id)}
    assert blocks == {"human": "Name: Ada", "persona": "A helper."}
    response = letta_1_12.agents.messages.create(agent.id, messages=[{"role": "user", "content": "hello"}])
    assert response.stop_reason is not None
    kinds = [m.message_type for m in response.messages]
    assert "assistant_message" in kinds, kinds
    assert not hasattr(letta_1_12, "batches")
