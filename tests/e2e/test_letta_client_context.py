"""Letta's client (1.7.0) on a long conversation through a small window: the agent's oldest messages
are summarized (Letta's summarization test: context_window_limit set low, then ten messages), its
window stays under the limit, and what left it is still listed and searchable. The module's server
(``tests/e2e/conftest.py``) on SQLite and PostgreSQL, the emulator behind it enforcing the window.
"""

from __future__ import annotations

import json

import httpx
from letta_client import Letta

from nightshift.emulator import EmulatorAdmin

MODEL = "anthropic/claude-3-5-haiku-20241022"
LIMIT = 6_000


async def test_ten_long_messages_through_a_small_window_are_summarized(
    letta: Letta, http: httpx.Client, admin: EmulatorAdmin
) -> None:
    await admin.configure(context_windows={MODEL.split("/", 1)[1]: LIMIT})
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="chatty", model=MODEL, context_window_limit=LIMIT, max_tokens=512
    )
    before = list(agent.message_ids or [])
    for n in range(10):
        story = f"Story {n}: " + " ".join(f"the river number{n}x{k} runs to the sea." for k in range(45))
        response = letta.agents.messages.create(agent_id=agent.id, messages=[{"role": "user", "content": story}])
        assert response.stop_reason is not None and response.stop_reason.stop_reason == "end_turn"

    after = letta.agents.retrieve(agent.id)
    window = list(after.message_ids or [])
    listed = letta.agents.messages.list(agent_id=agent.id, limit=1000, order="asc")

    context = http.get(f"/v1/agents/{agent.id}/context").json()
    found = http.post(
        f"/v1/agents/{agent.id}/tools/conversation_search/run", json={"args": {"query": "number0x3"}}
    ).json()

    # Summarization was triggered: the first messages left the window, a summary stands for them.
    assert not set(before[1:]) & set(window)
    assert context["summary_memory"] and context["context_window_size_current"] <= LIMIT - 512
    summaries = [
        m for m in listed.items if m.message_type == "user_message" and "left your context window" in str(m.content)
    ]
    assert summaries
    # Every story is still listed, and the first one is found by conversation_search.
    stories = [m for m in listed.items if m.message_type == "user_message" and str(m.content).startswith("Story ")]
    assert len(stories) == 10
    assert any("number0x3" in r["text"] for r in found["func_return"]["results"]), json.dumps(found)[:500]
