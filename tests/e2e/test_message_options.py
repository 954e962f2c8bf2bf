"""The options of Letta's send requests: each one a client sets is carried out, or refused with a
422 that names it; none is taken and ignored. Through letta-client 1.12.1 (what ``pip install``
gives today, which has every option) and plain HTTP, on the module's server (SQLite, then
PostgreSQL) with the emulator as both providers; what the provider was asked is read back from
the emulator's record of its model calls.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from letta_client import Letta

from support.letta_client_1_12 import letta_client_1_12
from support.runs import LOOKUP_TOOL

MODEL = "anthropic/claude-3-5-haiku-20241022"
OTHER = "openai/gpt-4o-mini"
ASK = "Please use lookup_order for B-2"
HELLO = [{"role": "user", "content": "hello"}]


def model_calls(emulator: str) -> list[dict[str, Any]]:
    """What the emulator's model was asked through the normal APIs (not in a batch), oldest first."""
    calls = httpx.get(f"{emulator}/_emulator/model_calls", timeout=30).raise_for_status().json()["data"]
    return [c["body"] for c in calls if c["custom_id"] is None]


def system_prompt(call: dict[str, Any]) -> str:
    """The system prompt of a model call, in either provider's wire format."""
    if "system" in call:
        return "".join(block["text"] for block in call["system"])
    (system,) = [m["content"] for m in call["messages"] if m["role"] == "system"]
    assert isinstance(system, str)
    return system


def listed(http: httpx.Client, agent_id: str, **params: Any) -> list[dict[str, Any]]:
    answer = http.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", **params})
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()
    return messages


def stored_ids(http: httpx.Client, agent_id: str) -> list[str]:
    return [m["id"] for m in listed(http, agent_id, limit=1000)]


def finished(letta_1_12: Any, run_id: str) -> Any:
    while (run := letta_1_12.runs.retrieve(run_id)).status in ("created", "running"):
        time.sleep(0.05)  # pytest-timeout ends a run that never finishes
    return run


@pytest.fixture
def clerk(letta_1_12: Any) -> str:
    """An agent on MODEL with the lookup tool (ASK makes it call the tool, then answer)."""
    tool = letta_1_12.tools.create(source_code=LOOKUP_TOOL)
    agent = letta_1_12.agents.create(
        agent_type="memgpt_v2_agent",
        name="clerk",
        model=MODEL,
        tool_ids=[tool.id],
        memory_blocks=[{"label": "human", "value": "?"}],
    )
    agent_id: str = agent.id
    return agent_id


# --- override_model -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["create", "stream", "async"])
def test_override_model_sends_the_steps_to_that_model_and_leaves_the_agent_alone(
    letta_1_12: Any, clerk: str, emulator: str, how: str
) -> None:
    if how == "create":
        response = letta_1_12.agents.messages.create(clerk, input=ASK, override_model=OTHER)
        assert response.stop_reason.stop_reason == "end_turn"
    elif how == "stream":
        with letta_1_12.agents.messages.create(clerk, input=ASK, override_model=OTHER, streaming=True) as stream:
            kinds = [chunk.message_type for chunk in stream]
        assert kinds[-2:] == ["stop_reason", "usage_statistics"]
    else:
        run = letta_1_12.agents.messages.create_async(clerk, input=ASK, override_model=OTHER)
        assert finished(letta_1_12, run.id).status == "completed"
    calls = model_calls(emulator)
    # Both steps (the lookup, then the answer) went to the other model, on its provider's API.
    assert [c["model"] for c in calls] == ["gpt-4o-mini", "gpt-4o-mini"]
    assert all(c["messages"][0]["role"] == "system" for c in calls)  # OpenAI's wire, not Anthropic's
    run_id = letta_1_12.agents.messages.list(clerk, order="desc", limit=1).items[0].run_id
    assert [s.model for s in letta_1_12.runs.steps.list(run_id)] == ["gpt-4o-mini", "gpt-4o-mini"]
    # The agent's own model is unchanged, and the next send goes to it.
    assert letta_1_12.agents.retrieve(clerk).model == MODEL
    letta_1_12.agents.messages.create(clerk, messages=HELLO)
    assert model_calls(emulator)[-1]["model"] == "claude-3-5-haiku-20241022"


@pytest.mark.parametrize("route", ["", "/stream", "/async"])
@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ("gpt-4o-mini", "provider/model-name"),
        ("mistral/large", "unknown provider 'mistral'"),
        ("/gpt-4o-mini", "provider/model-name"),
        ("", "provider/model-name"),
    ],
)
def test_a_bad_override_model_is_a_422_naming_it_and_nothing_is_written(
    http: httpx.Client, clerk: str, emulator: str, route: str, model: str, problem: str
) -> None:
    before = stored_ids(http, clerk)
    answer = http.post(f"/v1/agents/{clerk}/messages{route}", json={"input": ASK, "override_model": model})
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "override_model"
    assert problem in answer.json()["detail"]
    assert stored_ids(http, clerk) == before
    assert model_calls(emulator) == []


def test_a_bad_override_model_is_refused_through_the_client(letta_1_12: Any, clerk: str) -> None:
    with pytest.raises(letta_client_1_12().UnprocessableEntityError) as refused:
        letta_1_12.agents.messages.create(clerk, messages=HELLO, override_model="nope/model")
    assert "override_model" in str(refused.value)


# --- override_system ------------------------------------------------------------------------


@pytest.mark.parametrize("model", [MODEL, OTHER])
def test_override_system_replaces_the_system_prompt_of_that_send_only(
    letta_1_12: Any, http: httpx.Client, emulator: str, model: str
) -> None:
    agent = letta_1_12.agents.create(
        agent_type="memgpt_v2_agent", name="prompted", model=model, memory_blocks=[{"label": "human", "value": "Ada"}]
    )
    system_before = listed(http, agent.id)[0]
    assert system_before["message_type"] == "system_message"
    letta_1_12.agents.messages.create(agent.id, messages=HELLO, override_system="You answer in French.")
    (call,) = model_calls(emulator)
    assert system_prompt(call) == "You answer in French."
    # The stored system message (memory and all) is unchanged, and the next send uses it again.
    assert listed(http, agent.id)[0] == system_before
    letta_1_12.agents.messages.create(agent.id, messages=HELLO)
    again = system_prompt(model_calls(emulator)[-1])
    assert again != "You answer in French." and "Ada" in again


def test_override_system_and_model_together_on_an_async_send(letta_1_12: Any, clerk: str, emulator: str) -> None:
    run = letta_1_12.agents.messages.create_async(
        clerk, input=ASK, override_model=OTHER, override_system="Be brief; use lookup_order."
    )
    assert finished(letta_1_12, run.id).status == "completed"
    calls = model_calls(emulator)
    assert [c["model"] for c in calls] == ["gpt-4o-mini", "gpt-4o-mini"]
    assert [system_prompt(c) for c in calls] == ["Be brief; use lookup_order."] * 2


# --- include_return_message_types and the view options ----------------------------------------


def test_include_return_message_types_filters_a_send_each_way(letta_1_12: Any, clerk: str) -> None:
    wanted = ["assistant_message", "tool_return_message"]
    response = letta_1_12.agents.messages.create(clerk, input=ASK, include_return_message_types=wanted)
    kinds = [m.message_type for m in response.messages]
    assert kinds == ["tool_return_message", "assistant_message", "tool_return_message"], kinds

    for tokens in (False, True):
        with letta_1_12.agents.messages.create(
            clerk, input=ASK, streaming=True, stream_tokens=tokens, include_return_message_types=["assistant_message"]
        ) as stream:
            kinds = [chunk.message_type for chunk in stream]
        assert kinds[-2:] == ["stop_reason", "usage_statistics"]
        assert set(kinds[:-2]) == {"assistant_message"}, (tokens, kinds)

    run = letta_1_12.agents.messages.create_async(clerk, input=ASK, include_return_message_types=["tool_call_message"])
    assert finished(letta_1_12, run.id).status == "completed"
    kinds = [m.message_type for m in letta_1_12.runs.messages.list(run.id)]
    assert kinds == ["tool_call_message"], kinds


def test_a_stream_of_tokens_follows_use_assistant_message(letta_1_12: Any, clerk: str) -> None:
    with letta_1_12.agents.messages.create(
        clerk, input=ASK, streaming=True, stream_tokens=True, use_assistant_message=False
    ) as stream:
        chunks = list(stream)
    kinds = {chunk.message_type for chunk in chunks}
    assert "assistant_message" not in kinds
    calls = {chunk.tool_call.name for chunk in chunks if chunk.message_type == "tool_call_message" and chunk.tool_call}
    assert calls == {"lookup_order", "send_message"}


def test_the_message_listing_takes_the_view_options(letta_1_12: Any, http: httpx.Client, clerk: str) -> None:
    letta_1_12.agents.messages.create(clerk, input=ASK)
    everything = [m.message_type for m in letta_1_12.agents.messages.list(clerk, order="asc")]
    assert "assistant_message" in everything and "reasoning_message" in everything
    only = letta_1_12.agents.messages.list(
        clerk, order="asc", include_return_message_types=["assistant_message", "user_message"]
    )
    assert [m.message_type for m in only] == [k for k in everything if k in ("assistant_message", "user_message")]
    # Without the assistant message, send_message is a tool call like any other.
    plain = [m.message_type for m in letta_1_12.agents.messages.list(clerk, order="asc", use_assistant_message=False)]
    assert "assistant_message" not in plain
    # (the greeting among the agent's first messages is a send_message call too)
    assert plain.count("tool_call_message") == everything.count("tool_call_message") + everything.count(
        "assistant_message"
    )
    # Another tool named as the assistant's: its argument is shown as what the assistant said.
    renamed = listed(http, clerk, assistant_message_tool_name="lookup_order", assistant_message_tool_kwarg="order_id")
    said = [m["content"] for m in renamed if m["message_type"] == "assistant_message"]
    assert said == ["B-2"]
    # Types of letta-client 1.12 that nightshift never shows are taken, and match nothing.
    assert listed(http, clerk, include_return_message_types=["summary_message", "event_message"]) == []
    bad = http.get(f"/v1/agents/{clerk}/messages", params={"include_return_message_types": "gossip_message"})
    assert bad.status_code == 422 and "include_return_message_types" in bad.json()["detail"]


@pytest.mark.parametrize("param", ["group_id", "conversation_id"])
def test_the_message_listing_refuses_groups_and_conversations(http: httpx.Client, clerk: str, param: str) -> None:
    answer = http.get(f"/v1/agents/{clerk}/messages", params={param: "group-1"})
    assert answer.status_code == 422
    assert answer.json()["field"] == f"query.{param}"
    assert answer.json()["detail"].startswith(f"{param} is not supported")


# --- options refused when set, taken at their defaults ------------------------------------------

REFUSED: list[tuple[str, Any]] = [
    ("enable_thinking", "true"),
    ("enable_thinking", "True"),
    ("enable_thinking", True),
    ("enable_thinking", "high"),
    ("include_compaction_messages", True),
    ("return_logprobs", True),
    ("top_logprobs", 5),
    ("return_token_ids", True),
    ("client_skills", [{"name": "pdf", "description": "Reads PDFs", "location": "skills/pdf/SKILL.md"}]),
]
DEFAULTS: dict[str, Any] = {
    "enable_thinking": "false",
    "include_compaction_messages": False,
    "return_logprobs": False,
    "top_logprobs": None,
    "return_token_ids": False,
    "client_skills": [],
    "override_model": None,
    "override_system": None,
    "include_return_message_types": None,
}


@pytest.mark.parametrize("route", ["", "/stream", "/async"])
@pytest.mark.parametrize(("option", "value"), REFUSED)
def test_an_option_nightshift_does_not_carry_out_is_a_422_naming_it(
    http: httpx.Client, clerk: str, emulator: str, route: str, option: str, value: Any
) -> None:
    before = stored_ids(http, clerk)
    answer = http.post(f"/v1/agents/{clerk}/messages{route}", json={"input": ASK, option: value})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["field"] == option
    assert f"{option} is not supported" in body["detail"]
    assert stored_ids(http, clerk) == before
    assert model_calls(emulator) == []


def test_a_refused_option_through_the_client(letta_1_12: Any, clerk: str) -> None:
    errors = letta_client_1_12()
    for option, value in (("enable_thinking", "true"), ("return_logprobs", True), ("top_logprobs", 3)):
        with pytest.raises(errors.UnprocessableEntityError) as refused:
            letta_1_12.agents.messages.create(clerk, messages=HELLO, **{option: value})
        assert option in str(refused.value)


@pytest.mark.parametrize("route", ["", "/stream", "/async"])
def test_the_defaults_and_unknown_fields_are_taken(http: httpx.Client, letta_1_12: Any, clerk: str, route: str) -> None:
    # A client that sends every option at its default (and fields of a newer Letta) is served.
    body = {"messages": HELLO, **DEFAULTS, "some_future_option": {"x": 1}, "enable_thinking": "false"}
    answer = http.post(f"/v1/agents/{clerk}/messages{route}", json=body)
    assert answer.status_code == 200, answer.text
    if route == "/async":
        assert finished(letta_1_12, answer.json()["id"]).status == "completed"
    # And one that sets none of them, as letta-client sends by default.
    letta_1_12.agents.messages.create(clerk, messages=HELLO)


# --- batch requests -----------------------------------------------------------------------------

BATCH_REFUSED: list[tuple[str, Any]] = [
    *REFUSED,
    ("override_model", OTHER),
    ("override_system", "Be brief."),
    ("use_assistant_message", False),
    ("assistant_message_tool_name", "lookup_order"),
    ("assistant_message_tool_kwarg", "text"),
    ("include_return_message_types", ["assistant_message"]),
]


@pytest.mark.parametrize(("option", "value"), BATCH_REFUSED)
def test_a_batch_request_option_a_batch_does_not_carry_out_is_a_422_naming_it(
    http: httpx.Client, clerk: str, option: str, value: Any
) -> None:
    requests = [{"agent_id": clerk, "input": ASK, option: value}]
    answer = http.post("/v1/messages/batches", json={"requests": requests})
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == f"requests.0.{option}"
    assert f"{option} is not supported" in answer.json()["detail"]
    assert http.get("/v1/messages/batches").json() == []


def test_a_batch_request_with_the_defaults_runs(letta: Letta, clerk: str) -> None:
    # letta-client 1.7.0 (1.12 has no batches), every option it has set to Letta's default.
    run = letta.batches.create(
        requests=[
            {
                "agent_id": clerk,
                "input": ASK,
                "use_assistant_message": True,
                "assistant_message_tool_name": "send_message",
                "assistant_message_tool_kwarg": "message",
                "include_return_message_types": None,
                "enable_thinking": "false",
            }
        ]
    )
    while (current := letta.batches.retrieve(run.id)).status in ("created", "running"):
        time.sleep(0.05)  # pytest-timeout ends a run that never finishes
    assert current.status == "completed"


# --- fields of the messages themselves ---------------------------------------------------------


def test_a_message_keeps_its_name_and_otid_in_a_send_and_in_a_batch_run(
    letta: Letta, letta_1_12: Any, http: httpx.Client
) -> None:
    agent = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="host", model=MODEL)
    letta_1_12.agents.messages.create(
        agent.id, messages=[{"role": "user", "content": "hello", "name": "ada", "otid": "otid-send-1"}]
    )
    run = letta.batches.create(
        requests=[
            {
                "agent_id": agent.id,
                "messages": [
                    {"role": "user", "content": "plain"},
                    {"role": "user", "content": "named", "name": "grace", "otid": "otid-batch-1"},
                ],
            }
        ]
    )
    while letta.batches.retrieve(run.id).status in ("created", "running"):
        time.sleep(0.05)  # pytest-timeout ends a run that never finishes
    users = [
        (m["content"], m["name"], m["otid"]) for m in listed(http, agent.id) if m["message_type"] == "user_message"
    ]
    sent = [(content, name, otid) for content, name, otid in users if content in ("hello", "plain", "named")]
    assert [(c, n) for c, n, _ in sent] == [("hello", "ada"), ("plain", None), ("named", "grace")]
    assert sent[0][2] == "otid-send-1" and sent[2][2] == "otid-batch-1"


@pytest.mark.parametrize("field", ["group_id", "sender_id", "batch_item_id"])
def test_a_message_naming_a_group_an_identity_or_a_batch_item_is_refused(
    http: httpx.Client, clerk: str, field: str
) -> None:
    message = {"role": "user", "content": "hello", field: "x-1"}
    before = stored_ids(http, clerk)
    answer = http.post(f"/v1/agents/{clerk}/messages", json={"messages": [message]})
    assert answer.status_code == 422, answer.text
    assert f"{field} is not supported" in answer.json()["detail"]
    assert answer.json()["field"] == "messages.0"
    in_batch = http.post("/v1/messages/batches", json={"requests": [{"agent_id": clerk, "messages": [message]}]})
    assert in_batch.status_code == 422, in_batch.text
    assert f"{field} is not supported" in in_batch.json()["detail"]
    assert stored_ids(http, clerk) == before
    # Unset (null) is Letta's default, and taken.
    taken = http.post(f"/v1/agents/{clerk}/messages", json={"messages": [{**message, field: None}]})
    assert taken.status_code == 200, taken.text
