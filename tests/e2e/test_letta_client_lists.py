"""Letta's client (1.7.0) on the listings and small endpoints: message cursors, reset, initial
messages, tags, models, query_text, generate, the default block limit and tool rules naming tools
an agent lacks. The module's server (``tests/e2e/conftest.py``) on SQLite and PostgreSQL, the emulator behind it;
each test in an organization of its own.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import letta_client
import pytest
from letta_client import Letta
from letta_client.types.agents.image_content_param import ImageContentParam
from letta_client.types.agents.text_content_param import TextContentParam

MODEL = "anthropic/claude-3-5-haiku-20241022"


def ids(page: Any) -> list[str]:
    return [m.id for m in page.items]


def window(agent: Any) -> list[str]:
    """The agent's in-context message ids (the client types them as optional)."""
    assert agent.message_ids is not None
    return list(agent.message_ids)


def test_message_cursors_follow_the_sort_order(letta: Letta) -> None:
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="talker",
        model=MODEL,
        include_base_tools=False,
        initial_message_sequence=[{"role": "user", "content": f"note {n}"} for n in range(6)],
    )
    oldest_first = ids(letta.agents.messages.list(agent.id, order="asc"))
    assert len(oldest_first) == 7  # the system message and the six notes
    assert oldest_first == window(agent)
    newest_first = ids(letta.agents.messages.list(agent.id))
    assert newest_first == oldest_first[::-1]
    middle = oldest_first[3]
    # As Letta documents them: after and before are "in the specified sort order".
    assert ids(letta.agents.messages.list(agent.id, after=middle, order="asc")) == oldest_first[4:]
    assert ids(letta.agents.messages.list(agent.id, after=middle, order="desc")) == oldest_first[:3][::-1]
    assert ids(letta.agents.messages.list(agent.id, before=middle, order="asc")) == oldest_first[:3]
    assert ids(letta.agents.messages.list(agent.id, before=middle, order="desc")) == oldest_first[4:][::-1]
    assert (
        ids(letta.agents.messages.list(agent.id, after=oldest_first[1], before=oldest_first[5], order="asc"))
        == (oldest_first[2:5])
    )
    assert (
        ids(letta.agents.messages.list(agent.id, after=oldest_first[5], before=oldest_first[1], order="desc"))
        == (oldest_first[2:5][::-1])
    )
    # limit keeps the first of the page's order, next to the cursor.
    assert ids(letta.agents.messages.list(agent.id, after=oldest_first[-1], limit=2)) == oldest_first[-2:-4:-1]
    assert ids(letta.agents.messages.list(agent.id, after=oldest_first[0], limit=2, order="asc")) == oldest_first[1:3]
    # before: the messages nearest the cursor, shown in the page's order.
    assert (
        ids(letta.agents.messages.list(agent.id, before=oldest_first[-1], limit=2, order="asc"))
        == (oldest_first[-3:-1])
    )
    assert ids(letta.agents.messages.list(agent.id, before=oldest_first[0], limit=2)) == oldest_first[2:0:-1]
    # Walking back from the newest, a page at a time, as a chat view does.
    seen: list[str] = []
    page = letta.agents.messages.list(agent.id, limit=3)
    while page.items:
        seen += ids(page)
        page = letta.agents.messages.list(agent.id, limit=3, after=seen[-1])
    assert seen == newest_first


def test_initial_message_sequence_replaces_the_greeting(letta: Letta) -> None:
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="primed",
        model=MODEL,
        initial_message_sequence=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada."},
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        ],
    )
    messages = list(letta.agents.messages.list(agent.id, order="asc").items)
    assert [m.message_type for m in messages] == ["system_message", "user_message", "assistant_message", "user_message"]
    contents = [getattr(m, "content", None) for m in messages[1:]]
    assert contents == ["My name is Ada.", "Hello Ada.", "[system] Be brief."]
    empty = letta.agents.create(agent_type="memgpt_v2_agent", name="bare", model=MODEL, initial_message_sequence=[])
    assert len(window(empty)) == 1
    plain = letta.agents.create(agent_type="memgpt_v2_agent", name="plain", model=MODEL)
    assert len(window(plain)) == 4  # system, greeting, its result, login


def test_reset_messages_keeps_the_system_message(letta: Letta) -> None:
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="forgetful",
        model=MODEL,
        memory_blocks=[{"label": "human", "value": "Likes tea."}],
        initial_message_sequence=[{"role": "user", "content": f"fact {n}"} for n in range(3)],
    )
    system_id = window(agent)[0]
    reset = letta.agents.messages.reset(agent.id)
    assert reset is not None
    assert reset.message_ids == [system_id]
    assert ids(letta.agents.messages.list(agent.id)) == [system_id]
    assert letta.agents.blocks.retrieve("human", agent_id=agent.id).value == "Likes tea."
    again = letta.agents.messages.reset(agent.id, add_default_initial_messages=True)
    assert again is not None
    assert len(window(again)) == 4
    assert window(again)[0] == system_id
    listed = list(letta.agents.messages.list(agent.id, order="asc").items)
    assert [m.message_type for m in listed] == [
        "system_message",
        "reasoning_message",
        "assistant_message",
        "tool_return_message",
        "user_message",
    ]
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.messages.reset("agent-nope")


def test_tags_are_listed_alphabetically_with_cursors(letta: Letta) -> None:
    letta.agents.create(
        agent_type="memgpt_v2_agent", name="a", model=MODEL, include_base_tools=False, tags=["zeta", "alpha", "Mixed"]
    )
    letta.agents.create(
        agent_type="memgpt_v2_agent", name="b", model=MODEL, include_base_tools=False, tags=["alpha", "beta"]
    )
    everything = letta.tags.list()
    assert sorted(everything) == ["Mixed", "alpha", "beta", "zeta"]
    assert len(everything) == 4
    lower = [t for t in everything if t.islower()]
    assert lower == ["alpha", "beta", "zeta"]
    assert letta.tags.list(order="desc")[0] == everything[-1]
    assert letta.tags.list(after="alpha", limit=1) == [everything[everything.index("alpha") + 1]]
    # before: the tags just before the cursor in the listing's order, as with the other lists.
    assert letta.tags.list(before=everything[-1], limit=2) == everything[-3:-1]
    assert letta.tags.list(before=everything[0], limit=2, order="desc") == everything[2:0:-1]
    assert letta.tags.list(name="ET") == ["beta", "zeta"]
    assert letta.tags.list(query_text="mix") == ["Mixed"]


def test_agents_list_query_text_matches_a_part_of_the_name(letta: Letta) -> None:
    alpha = letta.agents.create(agent_type="memgpt_v2_agent", name="Support Bot", model=MODEL, include_base_tools=False)
    letta.agents.create(agent_type="memgpt_v2_agent", name="sales", model=MODEL, include_base_tools=False)
    percent = letta.agents.create(agent_type="memgpt_v2_agent", name="100% sure", model=MODEL, include_base_tools=False)
    assert [a.id for a in letta.agents.list(query_text="port").items] == [alpha.id]
    assert [a.id for a in letta.agents.list(query_text="SUPPORT").items] == [alpha.id]
    assert [a.id for a in letta.agents.list(query_text="%").items] == [percent.id]
    assert len(letta.agents.list(query_text="s").items) == 3


def test_models_and_embedding_models(letta: Letta) -> None:
    models = letta.models.list()
    handles = {m.handle for m in models}
    assert MODEL in handles
    assert any(h and h.startswith("openai/") for h in handles)
    haiku = next(m for m in models if m.handle == MODEL)
    assert haiku.provider_type == "anthropic"
    assert haiku.api_model_endpoint_type == "anthropic"
    assert haiku.max_context_window == 200_000
    only_openai = letta.models.list(provider_name="openai")
    assert only_openai and all(m.provider_name == "openai" for m in only_openai)
    embeddings = letta.models.embeddings.list()
    small = next(e for e in embeddings if e.name == "text-embedding-3-small")
    assert small.embedding_dim == 1536
    assert small.handle == "openai/text-embedding-3-small"
    # A listed model and embedding are accepted by agent create as they are.
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="picked", model=haiku.handle or "", embedding=small.handle
    )
    assert agent.embedding == small.handle


def test_default_block_limit_is_lettas(letta: Letta) -> None:
    block = letta.blocks.create(label="notes", value="short")
    assert block.limit == 20_000
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="roomy", model=MODEL, memory_blocks=[{"label": "human", "value": "x"}]
    )
    assert letta.agents.blocks.retrieve("human", agent_id=agent.id).limit == 20_000


def test_tool_rules_may_name_missing_tools_and_repeats_are_dropped(letta: Letta) -> None:
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="ruled",
        model=MODEL,
        tool_rules=[
            {"type": "exit_loop", "tool_name": "send_message"},
            {"type": "exit_loop", "tool_name": "not_attached_yet"},
            {"type": "exit_loop", "tool_name": "send_message"},
            {"type": "constrain_child_tools", "tool_name": "not_attached_yet", "children": ["send_message"]},
        ],
    )
    assert [(r.type, r.tool_name) for r in agent.tool_rules or []] == [
        ("exit_loop", "send_message"),
        ("exit_loop", "not_attached_yet"),
        ("constrain_child_tools", "not_attached_yet"),
    ]
    # The agent still runs: rules on tools it lacks never narrow its choice to nothing.
    response = letta.agents.messages.create(agent.id, messages=[{"role": "user", "content": "hello"}])
    assert response.stop_reason.stop_reason == "end_turn"


def model_calls(emulator: str) -> list[dict[str, Any]]:
    """What the emulator's model was asked through the normal APIs (not in a batch), oldest first."""
    calls = httpx.get(f"{emulator}/_emulator/model_calls", timeout=30).raise_for_status().json()["data"]
    return [c["body"] for c in calls if c["custom_id"] is None]


def test_generate_calls_the_model_once_and_changes_nothing(letta: Letta, http: httpx.Client, emulator: str) -> None:
    agent = letta.agents.create(agent_type="memgpt_v2_agent", name="oracle", model=MODEL)
    before = ids(letta.agents.messages.list(agent.id))
    answer = http.post(f"/v1/agents/{agent.id}/generate", json={"prompt": "Say something short."})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert isinstance(body["content"], str) and body["content"]
    assert body["usage"]["total_tokens"] > 0
    assert ids(letta.agents.messages.list(agent.id)) == before
    (call,) = model_calls(emulator)
    assert call["model"] == "claude-3-5-haiku-20241022"
    assert call["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say something short."}]}]
    assert "tools" not in call and "system" not in call
    other = http.post(
        f"/v1/agents/{agent.id}/generate",
        json={"prompt": "Hi", "system_prompt": "Answer in one word.", "override_model": "openai/gpt-4o-mini"},
    )
    assert other.status_code == 200, other.text
    last = model_calls(emulator)[-1]
    assert last["model"] == "gpt-4o-mini"
    assert last["messages"][0] == {"role": "system", "content": "Answer in one word."}
    assert http.post(f"/v1/agents/{agent.id}/generate", json={"prompt": ""}).status_code == 422
    assert http.post(f"/v1/agents/{agent.id}/generate", json={"prompt": "x", "override_model": "nope"}).status_code == (
        422
    )
    assert http.post("/v1/agents/agent-nope/generate", json={"prompt": "x"}).status_code == 404


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.mark.parametrize("model", [MODEL, "openai/gpt-4o-mini"])
def test_an_image_part_reaches_the_provider(letta: Letta, emulator: str, model: str) -> None:
    agent = letta.agents.create(agent_type="memgpt_v2_agent", name="viewer", model=model)
    content: list[TextContentParam | ImageContentParam] = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]
    response = letta.agents.messages.create(agent.id, messages=[{"role": "user", "content": content}])
    assert response.stop_reason.stop_reason == "end_turn"
    first = model_calls(emulator)[0]
    user_turns = [m for m in first["messages"] if m["role"] == "user" and isinstance(m["content"], list)]
    seen = user_turns[-1]["content"]
    if model == MODEL:
        assert seen[-3:] == [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        ]
    else:
        assert seen == [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        ]
    # The image is stored with the message: the listing shows it, and the next step sends it again.
    (sent,) = [m for m in letta.agents.messages.list(agent.id, order="asc").items if m.message_type == "user_message"][
        -1:
    ]
    assert isinstance(sent.content, list)
    assert [part.type for part in sent.content] == ["text", "image", "image"]
    letta.agents.messages.create(agent.id, messages=[{"role": "user", "content": "And now?"}])
    assert PNG in json.dumps(model_calls(emulator)[-1]["messages"])


def test_bad_image_parts_are_422_and_nothing_is_written(letta: Letta, http: httpx.Client) -> None:
    agent = letta.agents.create(agent_type="memgpt_v2_agent", name="strict", model=MODEL)
    before = ids(letta.agents.messages.list(agent.id))
    for source in (
        {"type": "base64", "media_type": "image/bmp", "data": PNG},
        {"type": "base64", "media_type": "image/png", "data": "not base64!"},
        {"type": "url", "url": "file:///etc/passwd"},
        {"type": "letta", "file_id": "file-1"},
    ):
        answer = http.post(
            f"/v1/agents/{agent.id}/messages",
            json={"messages": [{"role": "user", "content": [{"type": "image", "source": source}]}]},
        )
        assert answer.status_code == 422, answer.text
    assert ids(letta.agents.messages.list(agent.id)) == before


def test_an_image_part_reaches_the_provider_in_a_batch_run(letta: Letta, emulator: str) -> None:
    agent = letta.agents.create(agent_type="memgpt_v2_agent", name="batch-viewer", model=MODEL)
    image: ImageContentParam = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}
    run = letta.batches.create(requests=[{"agent_id": agent.id, "messages": [{"role": "user", "content": [image]}]}])
    while (current := letta.batches.retrieve(run.id)).status in ("created", "running"):
        time.sleep(0.05)  # pytest-timeout ends a run that never finishes
    assert current.status == "completed"
    calls = httpx.get(f"{emulator}/_emulator/model_calls", params={"custom_id": agent.id}, timeout=30).json()["data"]
    first_user_turns = [m for m in calls[0]["body"]["messages"] if m["role"] == "user"]
    assert first_user_turns[-1]["content"][-1] == image


def test_agents_include_fills_only_the_relations_asked_for(letta: Letta) -> None:
    made = letta.agents.create(agent_type="memgpt_v2_agent", name="light", model=MODEL, tags=["t"])
    assert made.tools and made.tags == ["t"]
    (listed,) = letta.agents.list(include=["agent.tags"]).items
    assert listed.id == made.id and listed.tags == ["t"] and listed.tools == [] and listed.blocks == []
    one = letta.agents.retrieve(made.id, include=["agent.tools"])
    assert [t.id for t in one.tools] == [t.id for t in made.tools] and one.tags == []
