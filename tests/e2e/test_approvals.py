"""Approvals (human in the loop) and client-side tools through letta-client 1.12.1 against a real
server and the emulator, on SQLite and PostgreSQL.

A call of a tool that needs approval, or of a client-side tool, stops the agent with an approval
request (stop reason ``requires_approval``); the client's answer (an approval message) runs the
approved calls, returns the denials and the client's results to the model, and the agent goes on.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from letta_client import Letta

MODEL = "openai/gpt-4o-mini"
WEATHER_SOURCE = '''
def get_weather(city: str) -> str:
    """Tell the weather of a city.

    Args:
        city: The city.
    """
    return f"sunny in {city}"
'''
CLIPBOARD: dict[str, Any] = {
    "name": "read_clipboard",
    "description": "Read what is on the user's clipboard.",
    "parameters": {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]},
}


def _agent_with_weather(client: Any, *, by_default: bool) -> tuple[Any, Any]:
    tool = client.tools.create(source_code=WEATHER_SOURCE, default_requires_approval=by_default)
    agent = client.agents.create(agent_type="memgpt_v2_agent", name="careful", model=MODEL, tool_ids=[tool.id])
    return tool, agent


def _careful_memory(client: Any) -> Any:
    """An agent whose memory edits (core_memory_append, a base tool) wait for approval."""
    agent = client.agents.create(
        agent_type="memgpt_v2_agent",
        name="careful",
        model=MODEL,
        memory_blocks=[{"label": "human", "value": "Name: unknown"}],
    )
    updated = client.agents.tools.update_approval("core_memory_append", agent_id=agent.id, body_requires_approval=True)
    assert [(r.type, r.tool_name) for r in updated.tool_rules] == [("requires_approval", "core_memory_append")]
    return agent


def _ask_weather(client: Any, agent_id: str) -> Any:
    return client.agents.messages.create(
        agent_id, messages=[{"role": "user", "content": "Please call get_weather for Paris"}]
    )


def _ask_to_remember(client: Any, agent_id: str) -> Any:
    return client.agents.messages.create(
        agent_id, messages=[{"role": "user", "content": "Please remember that my cat is called Tom"}]
    )


def _human(client: Any, agent_id: str) -> str:
    return str(client.agents.blocks.retrieve("human", agent_id=agent_id).value)


def _request_of(response: Any) -> Any:
    """The approval request a response stopped on."""
    assert response.stop_reason.stop_reason == "requires_approval", response.stop_reason
    last = response.messages[-1]
    assert last.message_type == "approval_request_message", [m.message_type for m in response.messages]
    return last


def _kinds(response: Any) -> list[str]:
    return [m.message_type for m in response.messages]


def _returns_of(response: Any, call_id: str) -> list[Any]:
    return [m for m in response.messages if m.message_type == "tool_return_message" and m.tool_call_id == call_id]


def _approval(call_id: str, approve: bool, reason: str | None = None) -> dict[str, Any]:
    one: dict[str, Any] = {"type": "approval", "tool_call_id": call_id, "approve": approve}
    if reason is not None:
        one["reason"] = reason
    return {"type": "approval", "approvals": [one]}


def test_an_approved_call_runs_and_the_agent_goes_on(letta_1_12: Any) -> None:
    agent = _careful_memory(letta_1_12)
    request = _request_of(_ask_to_remember(letta_1_12, agent.id))
    assert request.tool_call.name == "core_memory_append"
    assert [c.name for c in request.tool_calls] == ["core_memory_append"]
    # Nothing ran: memory is as it was, and the listed history ends with the request.
    assert "Tom" not in _human(letta_1_12, agent.id)
    listed = letta_1_12.agents.messages.list(agent.id, order="asc").items
    assert listed[-1].message_type == "approval_request_message"
    assert listed[-1].id == request.id

    answer = letta_1_12.agents.messages.create(
        agent.id, messages=[_approval(request.tool_call.tool_call_id, approve=True)]
    )
    assert [r.status for r in _returns_of(answer, request.tool_call.tool_call_id)] == ["success"]
    assert "Tom" in _human(letta_1_12, agent.id)
    assert "assistant_message" in _kinds(answer)
    assert answer.stop_reason.stop_reason == "end_turn"
    # The agent awaits nothing now: a plain message goes through.
    again = letta_1_12.agents.messages.create(agent.id, messages=[{"role": "user", "content": "thanks"}])
    assert again.stop_reason.stop_reason == "end_turn"

    # Approval off again: the call runs at once.
    plain = letta_1_12.agents.tools.update_approval(
        "core_memory_append", agent_id=agent.id, body_requires_approval=False
    )
    assert not plain.tool_rules
    direct = letta_1_12.agents.messages.create(
        agent.id, messages=[{"role": "user", "content": "Please remember that my dog is called Rex"}]
    )
    assert direct.stop_reason.stop_reason == "end_turn"
    assert "approval_request_message" not in _kinds(direct)
    assert "Rex" in _human(letta_1_12, agent.id)


def test_a_letta_v1_agent_waits_for_approval_then_answers_in_text(letta_1_12: Any) -> None:
    """Today's agents: a letta_v1 agent (the default type) whose memory_insert waits for approval
    stops on the request, and once approved runs the edit and answers in text; denied, it answers
    in text too, the edit not made."""
    agent = letta_1_12.agents.create(name="careful", model=MODEL, memory_blocks=[{"label": "human", "value": "?"}])
    assert agent.agent_type == "letta_v1_agent"
    letta_1_12.agents.tools.update_approval("memory_insert", agent_id=agent.id, body_requires_approval=True)

    request = _request_of(_ask_to_remember(letta_1_12, agent.id))
    assert request.tool_call.name == "memory_insert"
    assert "Tom" not in _human(letta_1_12, agent.id)
    answer = letta_1_12.agents.messages.create(
        agent.id, messages=[_approval(request.tool_call.tool_call_id, approve=True)]
    )
    assert [r.status for r in _returns_of(answer, request.tool_call.tool_call_id)] == ["success"]
    assert "Tom" in _human(letta_1_12, agent.id)
    assert _kinds(answer)[-1] == "assistant_message", _kinds(answer)
    assert answer.stop_reason.stop_reason == "end_turn"

    denied_request = _request_of(
        letta_1_12.agents.messages.create(
            agent.id, messages=[{"role": "user", "content": "Please remember that my dog is called Rex"}]
        )
    )
    denied = letta_1_12.agents.messages.create(
        agent.id, messages=[_approval(denied_request.tool_call.tool_call_id, approve=False, reason="no dogs")]
    )
    assert [r.status for r in _returns_of(denied, denied_request.tool_call.tool_call_id)] == ["error"]
    assert "Rex" not in _human(letta_1_12, agent.id)
    assert _kinds(denied)[-1] == "assistant_message", _kinds(denied)
    assert denied.stop_reason.stop_reason == "end_turn"


def test_a_denied_call_returns_the_reason_to_the_model_and_the_agent_goes_on(letta_1_12: Any) -> None:
    agent = _careful_memory(letta_1_12)
    request = _request_of(_ask_to_remember(letta_1_12, agent.id))
    answer = letta_1_12.agents.messages.create(
        agent.id, messages=[_approval(request.tool_call.tool_call_id, approve=False, reason="not in the budget")]
    )
    returns = _returns_of(answer, request.tool_call.tool_call_id)
    assert [r.status for r in returns] == ["error"]
    assert "not in the budget" in returns[0].tool_return
    assert "Tom" not in _human(letta_1_12, agent.id)
    assert "assistant_message" in _kinds(answer)
    assert answer.stop_reason.stop_reason == "end_turn"


def test_a_tool_that_requires_approval_by_default_gives_agents_the_rule(letta_1_12: Any) -> None:
    tool, agent = _agent_with_weather(letta_1_12, by_default=True)
    assert tool.default_requires_approval is True
    assert letta_1_12.tools.retrieve(tool.id).default_requires_approval is True
    assert [(r.type, r.tool_name) for r in agent.tool_rules] == [("requires_approval", "get_weather")]
    # Attached later, it brings the rule too; a tool without the default brings none.
    later = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="later", model=MODEL)
    attached = letta_1_12.agents.tools.attach(tool.id, agent_id=later.id)
    assert [(r.type, r.tool_name) for r in attached.tool_rules] == [("requires_approval", "get_weather")]
    given = letta_1_12.agents.update(
        letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="given", model=MODEL).id, tool_ids=[tool.id]
    )
    assert [(r.type, r.tool_name) for r in given.tool_rules] == [("requires_approval", "get_weather")]
    letta_1_12.tools.update(tool.id, default_requires_approval=False)
    assert letta_1_12.tools.retrieve(tool.id).default_requires_approval is False
    plain = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="plain", model=MODEL, tool_ids=[tool.id])
    assert not plain.tool_rules

    # The gated call waits; denied, it never runs (a custom tool: no sandbox needed).
    request = _request_of(_ask_weather(letta_1_12, agent.id))
    assert request.tool_call.name == "get_weather"
    answer = letta_1_12.agents.messages.create(
        agent.id, messages=[_approval(request.tool_call.tool_call_id, approve=False)]
    )
    returns = _returns_of(answer, request.tool_call.tool_call_id)
    assert [r.status for r in returns] == ["error"]
    assert "sunny" not in returns[0].tool_return
    assert answer.stop_reason.stop_reason == "end_turn"


def test_the_older_approve_form_and_a_streamed_answer(letta_1_12: Any) -> None:
    agent = _careful_memory(letta_1_12)
    request = _request_of(_ask_to_remember(letta_1_12, agent.id))
    stream = letta_1_12.agents.messages.create(
        agent.id, messages=[{"type": "approval", "approve": True, "approval_request_id": request.id}], streaming=True
    )
    events = list(stream)
    kinds = [getattr(e, "message_type", None) for e in events]
    assert "tool_return_message" in kinds, kinds
    returns = [e for e in events if getattr(e, "message_type", None) == "tool_return_message"]
    assert returns[0].status == "success"
    assert any(getattr(e, "stop_reason", None) == "end_turn" for e in events), kinds


def test_a_client_side_tool_round_trip(letta_1_12: Any) -> None:
    agent = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="clienty", model=MODEL)
    first = letta_1_12.agents.messages.create(
        agent.id,
        messages=[{"role": "user", "content": "Please call read_clipboard for the shopping list"}],
        client_tools=[CLIPBOARD],
    )
    request = _request_of(first)
    assert request.tool_call.name == "read_clipboard"
    answer = letta_1_12.agents.messages.create(
        agent.id,
        messages=[
            {
                "type": "approval",
                "approvals": [
                    {
                        "type": "tool",
                        "tool_call_id": request.tool_call.tool_call_id,
                        "tool_return": "the shopping list: buy milk",
                        "status": "success",
                    }
                ],
            }
        ],
        client_tools=[CLIPBOARD],
    )
    returns = _returns_of(answer, request.tool_call.tool_call_id)
    assert [r.status for r in returns] == ["success"]
    assert "buy milk" in returns[0].tool_return
    assert "assistant_message" in _kinds(answer)
    said = [m.content for m in answer.messages if m.message_type == "assistant_message"]
    assert any("buy milk" in text for text in said), said
    assert answer.stop_reason.stop_reason == "end_turn"


def test_refusals_while_waiting_and_without_a_request(letta_1_12: Any, http: httpx.Client) -> None:
    agent = _careful_memory(letta_1_12)
    url = f"/v1/agents/{agent.id}/messages"
    nothing = http.post(url, json={"messages": [{"type": "approval", "approve": True}]})
    assert nothing.status_code == 409, nothing.text
    assert "no tool call awaiting approval" in nothing.text

    request = _request_of(_ask_to_remember(letta_1_12, agent.id))
    call_id = request.tool_call.tool_call_id
    busy = http.post(url, json={"messages": [{"role": "user", "content": "hello?"}]})
    assert busy.status_code == 409, busy.text
    assert "waiting for approval" in busy.text and call_id in busy.text
    streamed = http.post(f"{url}/stream", json={"messages": [{"role": "user", "content": "hello?"}]})
    assert streamed.status_code == 409, streamed.text

    bad_bodies: list[tuple[dict[str, Any], str]] = [
        (
            {"type": "approval", "approvals": [{"type": "approval", "tool_call_id": "call_nope", "approve": True}]},
            "call_nope",
        ),
        ({"type": "approval"}, "approvals"),
        ({"type": "approval", "approvals": [{"type": "approval", "tool_call_id": call_id}]}, "approve"),
        ({"type": "approval", "approve": True, "approval_request_id": "message-other"}, "message-other"),
        (
            {
                "type": "approval",
                "approvals": [
                    {"type": "approval", "tool_call_id": call_id, "approve": True},
                    {"type": "approval", "tool_call_id": call_id, "approve": False},
                ],
            },
            "twice",
        ),
        ({"type": "tool_return", "tool_returns": []}, "tool_returns"),
    ]
    for body, named in bad_bodies:
        refused = http.post(url, json={"messages": [body]})
        assert refused.status_code == 422, (body, refused.text)
        assert named in refused.text, (body, refused.text)
    with_text = http.post(
        url,
        json={"messages": [{"type": "approval", "approve": True}, {"role": "user", "content": "and also"}]},
    )
    assert with_text.status_code == 422, with_text.text

    # Still waiting, nothing lost: the right answer goes through.
    approved = http.post(url, json={"messages": [{"type": "approval", "approve": True}]})
    assert approved.status_code == 200, approved.text
    assert approved.json()["stop_reason"]["stop_reason"] == "end_turn"


def test_a_client_side_tool_cannot_be_approved_on_the_server(letta_1_12: Any, http: httpx.Client) -> None:
    agent = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="clienty", model=MODEL)
    request = _request_of(
        letta_1_12.agents.messages.create(
            agent.id,
            messages=[{"role": "user", "content": "Please call read_clipboard for the shopping list"}],
            client_tools=[CLIPBOARD],
        )
    )
    approve = {"type": "approval", "tool_call_id": request.tool_call.tool_call_id, "approve": True}
    refused = http.post(
        f"/v1/agents/{agent.id}/messages", json={"messages": [{"type": "approval", "approvals": [approve]}]}
    )
    assert refused.status_code == 422, refused.text
    assert "client-side tool" in refused.text


@pytest.mark.parametrize(
    "tool",
    [
        {"name": "bad name!", "parameters": {"type": "object", "properties": {}}},
        {"name": "listy", "parameters": {"type": "array"}},
    ],
)
def test_a_bad_client_tool_is_a_422(letta_1_12: Any, http: httpx.Client, tool: dict[str, Any]) -> None:
    agent = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="clienty", model=MODEL)
    refused = http.post(
        f"/v1/agents/{agent.id}/messages",
        json={"messages": [{"role": "user", "content": "hi"}], "client_tools": [tool]},
    )
    assert refused.status_code == 422, refused.text
    assert "client tool" in refused.text


def test_the_approval_setting_of_a_tool(letta_1_12: Any, http: httpx.Client) -> None:
    agent = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="plain", model=MODEL)
    missing = http.patch(f"/v1/agents/{agent.id}/tools/approval/get_weather", json={"requires_approval": True})
    assert missing.status_code == 404, missing.text
    assert "get_weather" in missing.text
    # The setting may come as a query parameter too, as Letta takes it; with neither, a 422.
    url = f"/v1/agents/{agent.id}/tools/approval/send_message"
    by_query = http.patch(url, params={"requires_approval": "true"})
    assert by_query.status_code == 200, by_query.text
    assert by_query.json()["tool_rules"] == [{"type": "requires_approval", "tool_name": "send_message"}]
    twice = http.patch(url, json={"requires_approval": True})
    assert twice.json()["tool_rules"] == [{"type": "requires_approval", "tool_name": "send_message"}]
    neither = http.patch(url)
    assert neither.status_code == 422, neither.text
    assert "requires_approval" in neither.text


def _finished_run(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """A batch run made from ``body``, once it has ended."""
    created = http.post("/v1/messages/batches", json=body)
    assert created.status_code == 200, created.text
    deadline = time.monotonic() + 30
    while (run := http.get(f"/v1/messages/batches/{created.json()['id']}").json())["status"] in ("created", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.05)
    return dict(run)


def _history(http: httpx.Client, agent_id: str) -> list[dict[str, Any]]:
    listed = http.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 100})
    assert listed.status_code == 200, listed.text
    return list(listed.json())


def test_a_batch_run_leaves_agents_awaiting_approval_and_a_later_run_answers(
    letta_1_12: Any, http: httpx.Client
) -> None:
    gated = [_careful_memory(letta_1_12) for _ in range(2)]
    free = letta_1_12.agents.create(
        agent_type="memgpt_v2_agent", name="free", model=MODEL, memory_blocks=[{"label": "human", "value": "?"}]
    )
    ask = [{"role": "user", "content": "Please remember that my cat is called Tom"}]
    run = _finished_run(http, {"requests": [{"agent_id": a.id, "messages": ask} for a in [*gated, free]]})
    assert run["status"] == "completed", run
    agents = run["progress"]["agents"]
    assert (agents["awaiting_approval"], agents["finished"], agents["failed"]) == (2, 1, 0), run["progress"]
    assert "Tom" in _human(letta_1_12, free.id)
    requests = {}
    for agent in gated:
        last = _history(http, agent.id)[-1]
        assert last["message_type"] == "approval_request_message", last
        requests[agent.id] = last
        assert "Tom" not in _human(letta_1_12, agent.id)

    # A plain message for an agent awaiting approval: refused, nothing written.
    refused = http.post("/v1/messages/batches", json={"requests": [{"agent_id": gated[0].id, "messages": ask}]})
    assert refused.status_code == 409, refused.text
    assert "waiting for approval" in refused.text

    approve, deny = gated
    answers = [
        {"agent_id": approve.id, "messages": [_approval(requests[approve.id]["tool_call"]["tool_call_id"], True)]},
        {
            "agent_id": deny.id,
            "messages": [_approval(requests[deny.id]["tool_call"]["tool_call_id"], False, reason="private")],
        },
    ]
    # A run refused for one agent writes no answer for another: both still wait.
    mixed = [answers[0], {"agent_id": deny.id, "messages": ask}]
    refused = http.post("/v1/messages/batches", json={"requests": mixed})
    assert refused.status_code == 409, refused.text
    for agent in gated:
        assert _history(http, agent.id)[-1] == requests[agent.id]
        assert "Tom" not in _human(letta_1_12, agent.id)

    second = _finished_run(http, {"requests": answers})
    assert second["status"] == "completed", second
    assert second["progress"]["agents"]["finished"] == 2, second["progress"]
    assert "Tom" in _human(letta_1_12, approve.id)
    assert "Tom" not in _human(letta_1_12, deny.id)
    denied_call = requests[deny.id]["tool_call"]["tool_call_id"]
    returned = [m for m in _history(http, deny.id) if m.get("tool_call_id") == denied_call]
    assert [m["status"] for m in returned] == ["error"] and "private" in returned[0]["tool_return"]
    for agent in gated:
        kinds = [m["message_type"] for m in _history(http, agent.id)]
        assert kinds[-2:] == ["assistant_message", "tool_return_message"], kinds  # it went on and answered

    # An answer for an agent that awaits none is refused too.
    again = http.post("/v1/messages/batches", json={"requests": answers[:1]})
    assert again.status_code == 409, again.text


def test_a_client_side_tool_in_a_batch_run(letta_1_12: Any, http: httpx.Client) -> None:
    agent = letta_1_12.agents.create(agent_type="memgpt_v2_agent", name="clienty", model=MODEL)
    ask = [{"role": "user", "content": "Please call read_clipboard for the shopping list"}]
    run = _finished_run(http, {"requests": [{"agent_id": agent.id, "messages": ask, "client_tools": [CLIPBOARD]}]})
    assert run["progress"]["agents"]["awaiting_approval"] == 1, run["progress"]
    request = _history(http, agent.id)[-1]
    assert request["message_type"] == "approval_request_message"
    assert request["tool_call"]["name"] == "read_clipboard"
    tool_return = {
        "type": "tool",
        "tool_call_id": request["tool_call"]["tool_call_id"],
        "tool_return": "the shopping list: buy milk",
        "status": "success",
    }
    answer = {"type": "tool_return", "tool_returns": [tool_return]}
    second = _finished_run(http, {"requests": [{"agent_id": agent.id, "messages": [answer]}]})
    assert second["progress"]["agents"]["finished"] == 1, second["progress"]
    said = [m["content"] for m in _history(http, agent.id) if m["message_type"] == "assistant_message"]
    assert "buy milk" in said[-1], said


def test_letta_client_1_7_answers_in_the_background_and_returns_client_results(letta: Letta) -> None:
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="careful", model=MODEL, memory_blocks=[{"label": "human", "value": "?"}]
    )
    gated = letta.agents.tools.update_approval("core_memory_append", agent_id=agent.id, body_requires_approval=True)
    assert gated is not None
    assert [(r.type, r.tool_name) for r in gated.tool_rules or []] == [("requires_approval", "core_memory_append")]
    first = letta.agents.messages.create(
        agent.id, messages=[{"role": "user", "content": "Please remember that my cat is called Tom"}]
    )
    assert first.stop_reason.stop_reason == "requires_approval"
    request = first.messages[-1]
    assert request.message_type == "approval_request_message"
    # The answer in the background (/messages/async): the run ends once the edit ran and the agent answered.
    run = letta.agents.messages.create_async(
        agent.id, messages=[{"type": "approval", "approve": True, "approval_request_id": request.id}]
    )
    deadline = time.monotonic() + 30
    while (current := letta.runs.retrieve(run.id)).status in ("created", "running"):
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    assert current.status == "completed", current
    assert "Tom" in str(letta.agents.blocks.retrieve("human", agent_id=agent.id).value)

    clipboard = letta.agents.messages.create(
        agent.id,
        messages=[{"role": "user", "content": "Please call read_clipboard for the shopping list"}],
        client_tools=[CLIPBOARD],  # type: ignore[list-item]  # (a TypedDict there: this dict is one)
    )
    parked = clipboard.messages[-1]
    assert parked.message_type == "approval_request_message"
    assert parked.tool_call.name == "read_clipboard"
    call_id = str(parked.tool_call.tool_call_id)
    tool_return: Any = {"type": "tool", "tool_call_id": call_id, "tool_return": "no such clipboard", "status": "error"}
    answer = letta.agents.messages.create(agent.id, messages=[{"type": "approval", "approvals": [tool_return]}])
    returns = _returns_of(answer, call_id)
    assert [r.status for r in returns] == ["error"]
    assert "no such clipboard" in returns[0].tool_return
    assert answer.stop_reason.stop_reason == "end_turn"


def test_a_token_stream_ends_on_the_approval_request(letta_1_12: Any) -> None:
    agent = _careful_memory(letta_1_12)
    stream = letta_1_12.agents.messages.create(
        agent.id,
        messages=[{"role": "user", "content": "Please remember that my cat is called Tom"}],
        streaming=True,
        stream_tokens=True,
    )
    events = list(stream)
    kinds = [getattr(e, "message_type", None) for e in events]
    requests = [e for e in events if getattr(e, "message_type", None) == "approval_request_message"]
    assert len(requests) == 1, kinds
    assert requests[0].tool_call.name == "core_memory_append"
    assert "tool_return_message" not in kinds
    assert any(getattr(e, "stop_reason", None) == "requires_approval" for e in events), kinds
    # The request streamed is the one stored.
    listed = letta_1_12.agents.messages.list(agent.id, order="asc").items
    assert listed[-1].id == requests[0].id
