"""An agent's context window through the API: context_window_limit, and Letta's context overview."""

from __future__ import annotations

import httpx
import pytest

from support.api import json_object
from support.databases import sqlite_only
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL

# Nothing here starts a batch run: the apps answer the same without a poller looking for work.
pytestmark = pytest.mark.settings(poller=False)

READ_ONLY_FIELDS = (
    "context_window_size_max",
    "context_window_size_current",
    "num_messages",
    "num_archival_memory",
    "num_recall_memory",
    "num_tokens_external_memory_summary",
    "num_tokens_system",
    "num_tokens_core_memory",
    "num_tokens_summary_memory",
    "num_tokens_functions_definitions",
    "num_tokens_messages",
)


async def _agent(client: httpx.AsyncClient, **extra: object) -> dict[str, object]:
    return json_object(await client.post("/v1/agents/", json={"name": "windowed", "model": ANTHROPIC_MODEL, **extra}))


async def test_context_window_limit_is_set_on_create_and_update_and_capped_at_the_models_window(
    client: httpx.AsyncClient,
) -> None:
    agent = await _agent(client, context_window_limit=8_000)
    assert agent["llm_config"]["context_window"] == 8_000  # type: ignore[index]

    updated = json_object(await client.patch(f"/v1/agents/{agent['id']}", json={"context_window_limit": 12_000}))
    assert updated["llm_config"]["context_window"] == 12_000
    assert updated["llm_config"]["model"] == agent["llm_config"]["model"]  # type: ignore[index]
    assert updated["llm_config"]["max_tokens"] == agent["llm_config"]["max_tokens"]  # type: ignore[index]

    # More than the model takes is the model's window (claude-3-5-haiku: 200,000; gpt-4o-mini: 128,000).
    capped = await _agent(client, context_window_limit=5_000_000)
    assert capped["llm_config"]["context_window"] == 200_000  # type: ignore[index]
    moved = json_object(
        await client.patch(f"/v1/agents/{capped['id']}", json={"model": OPENAI_MODEL, "context_window_limit": 999_999})
    )
    assert moved["llm_config"]["context_window"] == 128_000

    refused = await client.patch(f"/v1/agents/{agent['id']}", json={"context_window_limit": 0})
    assert refused.status_code == 422, refused.text


async def test_the_context_overview_counts_each_part_of_the_next_request(client: httpx.AsyncClient) -> None:
    agent = await _agent(
        client,
        agent_type="memgpt_v2_agent",
        context_window_limit=30_000,
        memory_blocks=[{"label": "human", "value": "Ada likes tea."}],
        initial_message_sequence=[{"role": "user", "content": f"message {n}"} for n in range(3)],
    )
    url = f"/v1/agents/{agent['id']}/archival-memory"
    assert (await client.post(url, json={"text": "a note"})).status_code == 200

    context = json_object(await client.get(f"/v1/agents/{agent['id']}/context"))

    assert all(isinstance(context[f], int) and context[f] >= 0 for f in READ_ONLY_FIELDS)
    assert context["context_window_size_max"] == 30_000
    assert context["num_messages"] == 4  # the system message and the three given
    assert context["num_archival_memory"] == 1 and context["num_recall_memory"] == 4
    assert "Ada likes tea." in context["core_memory"] and context["num_tokens_core_memory"] > 0
    assert context["summary_memory"] is None and context["num_tokens_summary_memory"] == 0
    names = {f["function"]["name"] for f in context["functions_definitions"]}
    assert "send_message" in names and "conversation_search" in names
    assert [m["content"] for m in context["messages"]] == [f"message {n}" for n in range(3)]
    parts = sum(
        context[f]
        for f in (
            "num_tokens_system",
            "num_tokens_core_memory",
            "num_tokens_external_memory_summary",
            "num_tokens_functions_definitions",
            "num_tokens_messages",
        )
    )
    # What nightshift keeps the window by is the sum of the parts (up to the separators between them).
    assert abs(context["context_window_size_current"] - parts) <= 20, (context["context_window_size_current"], parts)


@sqlite_only
async def test_the_context_of_an_unknown_agent_is_a_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/agents/agent-00000000-0000-0000-0000-000000000000/context")

    assert response.status_code == 404, response.text
