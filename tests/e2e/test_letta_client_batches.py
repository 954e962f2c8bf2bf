"""letta-client 1.7.0 ``batches.*`` and ``agents.messages.create`` against a real server and the emulator."""

from __future__ import annotations

import time
from itertools import islice
from pathlib import Path

from letta_client import Letta

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.serving import running_server
from support.runs import LOOKUP_TOOL

MODEL = "anthropic/claude-3-5-haiku-20241022"


def test_batches_and_synchronous_messages(tmp_path: Path, db_url: str, emulator: str) -> None:
    settings = Settings(home=tmp_path, database_url=db_url, poll_interval_seconds=0.05)
    with running_server(create_app(settings)) as base_url:
        client = Letta(base_url=base_url, max_retries=0)
        tool = client.tools.create(source_code=LOOKUP_TOOL)
        agents = [
            client.agents.create(
                name=f"clerk-{i}", model=MODEL, tool_ids=[tool.id], memory_blocks=[{"label": "human", "value": "?"}]
            )
            for i in range(3)
        ]
        run = client.batches.create(
            requests=[
                {"agent_id": a.id, "messages": [{"role": "user", "content": "Please use lookup_order for A-17"}]}
                for a in agents
            ]
        )
        assert run.id.startswith("batch-")
        deadline = time.monotonic() + 30
        while (current := client.batches.retrieve(run.id)).status in ("created", "running"):
            assert time.monotonic() < deadline, current
            time.sleep(0.05)
        assert current.status == "completed"
        assert current.completed_at is not None
        assert run.id in [r.id for r in islice(client.batches.list(), 100)]

        messages = list(islice(client.batches.messages.list(run.id, order="asc", limit=4), 100))
        assert len(messages) == 3 * 6  # user, assistant+tool (lookup), heartbeat, assistant+tool (send_message)
        assert [m.id for m in messages] == sorted(m.id for m in messages)
        mine = [m for m in messages if m.agent_id == agents[0].id]
        assert [m.role for m in mine] == ["user", "assistant", "tool", "user", "assistant", "tool"]
        calls = [m.tool_calls[0].function.name for m in mine if m.role == "assistant" and m.tool_calls]
        assert calls == ["lookup_order", "send_message"]
        assert all(m.batch_item_id for m in mine)
        only_one = list(islice(client.batches.messages.list(run.id, agent_id=agents[1].id), 100))
        assert {m.agent_id for m in only_one} == {agents[1].id}

        # A cancelled run that has ended stays as it was.
        client.batches.cancel(run.id)
        assert client.batches.retrieve(run.id).status == "completed"

        response = client.agents.messages.create(
            agent_id=agents[0].id, messages=[{"role": "user", "content": "Please use lookup_order for B-2"}]
        )
        types = [m.message_type for m in response.messages]
        assert types[0] == "reasoning_message" and "user_message" not in types
        assert "tool_call_message" in types and "tool_return_message" in types and "assistant_message" in types
        assert response.stop_reason.stop_reason == "end_turn"
        assert response.usage.step_count == 2
        assert response.usage.completion_tokens and response.usage.prompt_tokens
