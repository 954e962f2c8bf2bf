"""The client's pure parts: the retry policy, reading error bodies, the requests file, a run's results."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from nightshift.client import _calls
from nightshift.client._http import (
    BACKOFF_CAP,
    Call,
    backoff,
    retry_after,
    status_delay,
    transport_delay,
)
from nightshift.client.errors import (
    Conflict,
    InvalidRequestsFile,
    NotFound,
    ServerError,
    Timeout,
    UnprocessableEntity,
    api_error,
)
from nightshift.client.requests_file import parse_requests, with_agent_ids
from nightshift.client.types import BatchRun, BatchRunAgent, RunMessage

GET: Call[Any] = Call(method="GET", path="/x", read=lambda body: body)
ONCE: Call[Any] = Call(method="POST", path="/x", read=lambda body: body, retry_sent=False)
REQUEST = httpx.Request("GET", "http://127.0.0.1/x")


def test_backoff_grows_and_stays_under_its_cap() -> None:
    rng = random.Random(7)
    for attempt in range(12):
        bound = min(BACKOFF_CAP, 0.5 * 2**attempt)
        draws = [backoff(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= bound for d in draws)
        assert max(draws) > bound / 2  # jittered over the whole range, not a fixed pause


def test_retry_after_in_seconds_or_as_a_date() -> None:
    in_a_minute = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)

    assert retry_after("3") == 3.0
    assert retry_after(" 0.5 ") == 0.5
    assert retry_after("-4") == 0.0
    assert 50 < (retry_after(in_a_minute) or 0) <= 60
    assert retry_after("soon") is None
    assert retry_after(None) is None


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [(503, {"retry-after": "2"}, 2.0), (429, {"retry-after": "0"}, 0.0), (503, {"retry-after": "3600"}, None),
     (500, {}, None), (404, {"retry-after": "1"}, None), (200, {}, None)],
)  # fmt: skip
def test_which_answers_are_tried_again(status: int, headers: dict[str, str], expected: float | None) -> None:
    response = httpx.Response(status, headers=headers, request=REQUEST)

    assert status_delay(response, 0, random.Random(1)) == expected


def test_a_429_without_retry_after_waits_the_backoff() -> None:
    delay = status_delay(httpx.Response(429, request=REQUEST), 2, random.Random(1))

    assert delay is not None and 0 <= delay <= 2.0


def test_which_broken_connections_are_tried_again() -> None:
    rng = random.Random(1)
    refused = httpx.ConnectError("refused", request=REQUEST)
    dropped = httpx.ReadError("reset", request=REQUEST)
    slow = httpx.ReadTimeout("slow", request=REQUEST)

    assert transport_delay(refused, ONCE, 0, rng) is not None  # never sent: always safe
    assert transport_delay(dropped, GET, 0, rng) is not None
    assert transport_delay(dropped, ONCE, 0, rng) is None  # sent, and not safe to send twice
    assert transport_delay(slow, GET, 0, rng) is None


def test_a_create_carries_an_idempotency_key_of_its_own() -> None:
    first = _calls.create_batch(
        [{"agent_id": "a", "input": "x"}], metadata=None, name="n", callback_url=None, idempotency_key=None
    )
    second = _calls.create_batch(
        [{"agent_id": "a", "input": "x"}], metadata={"k": 1}, name=None, callback_url=None, idempotency_key="mine"
    )

    assert first.retry_sent and first.headers["Idempotency-Key"] != ""
    assert first.json == {"requests": [{"agent_id": "a", "input": "x"}], "metadata": {"name": "n"}}
    assert second.headers["Idempotency-Key"] == "mine"
    assert second.json == {"requests": [{"agent_id": "a", "input": "x"}], "metadata": {"k": 1}}


def test_error_classes_and_messages_by_status() -> None:
    validation = {"detail": [{"loc": ["body", "requests", 2, "max_steps"], "msg": "too big"}, {"msg": "and this"}]}

    assert isinstance(api_error(404, {"detail": "batch run x not found"}), NotFound)
    assert api_error(404, {"detail": "batch run x not found"}).message == "batch run x not found"
    assert isinstance(api_error(409, {"detail": "busy"}), Conflict)
    error = api_error(422, validation)
    assert isinstance(error, UnprocessableEntity)
    assert error.message == "requests[2].max_steps: too big; body: and this"
    assert isinstance(api_error(502, "Bad Gateway"), ServerError)
    assert api_error(502, "Bad Gateway").message == "Bad Gateway"
    assert api_error(418, None, reason="I'm a teapot").message == "418 I'm a teapot"


def test_a_requests_file_in_json_lines() -> None:
    text = (
        '{"agent_id": "agent-1", "input": "hi"}\n\n'
        '{"agent_name": "ada", "messages": [{"role": "user", "content": "x"}], "max_steps": 2}\n'
    )

    lines = parse_requests("r.jsonl", text)

    assert [(line.line, line.agent_id, line.agent_name) for line in lines] == [(1, "agent-1", None), (3, None, "ada")]
    assert with_agent_ids("r.jsonl", lines, {"ada": ["agent-2"]}) == [
        {"agent_id": "agent-1", "input": "hi"},
        {"agent_id": "agent-2", "messages": [{"role": "user", "content": "x"}], "max_steps": 2},
    ]


SPREAD = "a JSON value spread over several lines; write one JSON object per line"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (json.dumps([{"agent_id": "a", "input": "x"}], indent=2), f"r.jsonl:1: {SPREAD} (JSON Lines)"),
        ('{\n  "agent_id": "a",\n  "input": "x"\n}\n', f"r.jsonl:1: {SPREAD}"),
        ('{"agent_id": "a", "input": "x"}\n{"agent_id": "b",\n',
         "r.jsonl:2: not JSON (Expecting property name enclosed in double quotes at column 18)"),
        ('[{"agent_id": "a", "input": "x"}]', "r.jsonl:1: a JSON array of requests; write one JSON object per line"),
        ('"agent-1"', "r.jsonl:1: expected a JSON object with 'agent_id' and 'messages', got a string"),
        ('{"agent_id": "a", "inptu": "x"}', "r.jsonl:1: 'inptu' is not a field of a request (did you mean 'input'?)"),
        ('{"agent_id": "a", "input": "x", "max_steps": 0}',
         "r.jsonl:1: 'max_steps': input should be greater than or equal to 1"),
        ('{"agent_id": "a"}', "r.jsonl:1: 'messages' or 'input' is required"),
        ("\n\n", "r.jsonl: no requests (expected one JSON object per line)"),
    ],
    ids=["pretty-array", "pretty-object", "broken", "array", "string", "typo", "max-steps", "no-input", "empty"],
)  # fmt: skip
def test_a_bad_requests_file_is_named_by_line(text: str, message: str) -> None:
    with pytest.raises(InvalidRequestsFile) as raised:
        parse_requests("r.jsonl", text)

    assert raised.value.message.startswith(message), raised.value.message


def test_names_that_match_no_agent_or_several_and_agents_named_twice() -> None:
    lines = parse_requests("r.jsonl", '{"agent_name": "ada", "input": "x"}\n{"agent_id": "agent-2", "input": "y"}')

    with pytest.raises(InvalidRequestsFile, match=r"^r.jsonl:1: no agent is named 'ada'$"):
        with_agent_ids("r.jsonl", lines, {"ada": []})
    with pytest.raises(InvalidRequestsFile, match=r"^r.jsonl:1: several agents are named 'ada'"):
        with_agent_ids("r.jsonl", lines, {"ada": ["agent-1", "agent-3"]})
    with pytest.raises(InvalidRequestsFile, match=r"^r.jsonl:2: agent agent-2 already has a request on line 1"):
        with_agent_ids("r.jsonl", lines, {"ada": ["agent-2"]})


def _message(agent_id: str, n: int, role: str, **fields: Any) -> RunMessage:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n)
    base: dict[str, Any] = {"id": f"message-{n:03}", "agent_id": agent_id, "role": role, "content": [], "name": None,
            "tool_calls": [], "tool_call_id": None, "created_at": at, "batch_item_id": None}  # fmt: skip
    return RunMessage.model_validate(base | fields)


def _agent(agent_id: str, state: str) -> BatchRunAgent:
    return BatchRunAgent.model_validate(
        {"agent_id": agent_id, "agent_name": agent_id.upper(), "agent_deleted": False, "state": state, "steps": 2,
         "step_number": 1, "usage": {"input_tokens": 10, "output_tokens": 5}, "cost_usd": 0.5,
         "cost_without_batch_usd": 1.0, "batch_savings_usd": 0.5, "cache_savings_usd": 0.0, "error": None}
    )  # fmt: skip


def test_results_gather_each_agents_replies_in_order() -> None:
    send = {"id": "call-1", "function": {"name": "send_message", "arguments": json.dumps({"message": "Bonsoir"})}}
    lookup = {"id": "call-2", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [
        _message("a", 4, "assistant", content=[{"type": "text", "text": "Done."}]),
        _message("a", 1, "user", content=[{"type": "text", "text": "hi"}]),
        _message("a", 2, "assistant", tool_calls=[lookup]),
        _message("b", 3, "assistant", tool_calls=[send]),
    ]

    found = _calls.results([_agent("a", "finished"), _agent("b", "finished"), _agent("c", "failed")], messages)

    assert [(r.agent_id, r.replies, r.final_message) for r in found] == [
        ("a", ["Done."], "Done."),
        ("b", ["Bonsoir"], "Bonsoir"),
        ("c", [], None),
    ]
    assert [m.id for m in found[0].messages] == ["message-001", "message-002", "message-004"]
    assert found[0].usage.total_tokens == 15 and found[2].state == "failed"


def _run(status: str) -> BatchRun:
    """A run as the server answers it, with nothing done yet."""
    now = datetime.now(UTC).isoformat()
    agents = {"running": 1, "finished": 0, "failed": 0, "cancelled": 0}
    progress = {"step": 0, "agents": agents, "summaries": 0, "failures": [], "usage": {}, "provider_batches": []}
    costs = dict.fromkeys(("cost_usd", "cost_without_batch_usd", "batch_savings_usd", "cache_savings_usd"), 0.0)
    run = {"id": "batch-1", "status": status, "created_at": now, "updated_at": now, "completed_at": None}
    callback = dict.fromkeys(("callback_url", "callback_sent_at", "callback_status_code", "callback_error"))
    return BatchRun.model_validate({**run, **callback, "metadata": {}, "progress": {**progress, **costs}})


def test_wait_looks_soon_at_first_then_every_poll_interval() -> None:
    running = _run("running")
    pauses = [_calls.next_look(running, None, looks, poll_interval=2.0, timeout=None) for looks in range(6)]
    assert pauses == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    ended = _run("completed")
    assert _calls.next_look(ended, None, 0, poll_interval=2.0, timeout=None) is None
    # Never past the deadline; past it, the wait ends with the client's Timeout.
    soon = time.monotonic() + 0.1
    pause = _calls.next_look(running, soon, 5, poll_interval=2.0, timeout=1.0)
    assert pause is not None and pause <= 0.1
    with pytest.raises(Timeout, match="still running after 1 s"):
        _calls.next_look(running, time.monotonic() - 1, 0, poll_interval=2.0, timeout=1.0)
