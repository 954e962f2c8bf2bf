"""letta-client cancelling an agent's run in flight, and deleting an agent while it steps.

A real server (SQLite and PostgreSQL) with the emulator as provider; the agent's custom tool runs
in the server's sandbox, a real process, whose sleep keeps a step in flight while the test acts.
A cancelled run lets go of its agent at once (a new send goes through while the old step's tool
still runs) and its step in flight writes nothing; deleting the agent ends its step the same way
(its runs go with it), a streamed step with Letta's ``cancelled`` stop reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from itertools import islice
from typing import Any

import httpx
import letta_client
import pytest
from letta_client import Letta

from nightshift.emulator.config import ScriptedReply, ScriptedToolCall

MODEL = "anthropic/claude-3-5-haiku-20241022"
PAUSE_SECONDS = 3

PAUSE_TOOL = '''
import time


def pause(seconds: float) -> str:
    """Wait a while.

    Args:
        seconds: How long to wait.
    """
    time.sleep(seconds)
    return "waited"
'''


def _script(emulator: str, *replies: ScriptedReply) -> None:
    body = {"custom_id": "*", "replies": [r.model_dump(mode="json") for r in replies]}
    httpx.post(f"{emulator}/_emulator/script", json=body).raise_for_status()


def _reset(emulator: str) -> None:
    """Forget the replies still scripted (a cancelled run leaves some)."""
    httpx.post(f"{emulator}/_emulator/reset", json={}).raise_for_status()


def _call(name: str, *, heartbeat: bool, **arguments: Any) -> ScriptedReply:
    return ScriptedReply(tool_call=ScriptedToolCall(name=name, arguments=arguments, request_heartbeat=heartbeat))


def _pausing_agent(letta: Letta, emulator: str) -> str:
    """An agent whose next run calls ``pause`` (in the sandbox) again and again."""
    tool = letta.tools.create(source_code=PAUSE_TOOL)
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="pauser",
        model=MODEL,
        tool_ids=[tool.id],
        memory_blocks=[{"label": "human", "value": "?"}],
    )
    _script(emulator, *[_call("pause", heartbeat=True, seconds=PAUSE_SECONDS) for _ in range(5)])
    return agent.id


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # waits for the server (another process) to get there


def _model_calls(emulator: str) -> int:
    return len(httpx.get(f"{emulator}/_emulator/model_calls").json()["data"])


def _kinds(letta: Letta, agent_id: str) -> list[str | None]:
    return [m.message_type for m in islice(letta.agents.messages.list(agent_id, order="asc", limit=100), 1000)]


def _answer(emulator: str, text: str) -> None:
    """The emulator's next answer: ``text``, as send_message (what is left of the scripts forgotten)."""
    _reset(emulator)
    _script(emulator, _call("send_message", heartbeat=False, message=text))


def test_cancel_a_background_run_frees_its_agent_at_once(letta: Letta, emulator: str) -> None:
    agent_id = _pausing_agent(letta, emulator)
    run = letta.agents.messages.create_async(agent_id=agent_id, input="wait a while")
    # In its tool: the model was called, the step is not written.
    _wait_for(lambda: _model_calls(emulator) == 1, "the run never called the model")
    assert letta.agents.messages.cancel(agent_id=agent_id) == {run.id: "cancelled"}
    cancelled = letta.runs.retrieve(run.id)
    assert (cancelled.status, cancelled.stop_reason) == ("cancelled", "cancelled")

    # A new send goes through at once (no 409), while the cancelled step's tool still runs.
    _answer(emulator, "here now")
    started = time.monotonic()
    answer = letta.agents.messages.create(agent_id=agent_id, input="still there?")
    assert [m.message_type for m in answer.messages][-2] == "assistant_message"
    assert answer.stop_reason.stop_reason == "end_turn"
    assert answer.messages[0].run_id != run.id

    # The cancelled step ends without writing: no step of it recorded, no message of its tool call.
    time.sleep(max(0.0, PAUSE_SECONDS + 1 - (time.monotonic() - started)))  # its tool (a real process) ends
    assert list(islice(letta.runs.steps.list(run.id), 10)) == []
    assert "tool_call_message" not in _kinds(letta, agent_id)
    assert letta.runs.retrieve(run.id).status == "cancelled"
    # A send after that goes through too: the ended step did not take the agent back.
    _answer(emulator, "and again")
    assert letta.agents.messages.create(agent_id=agent_id, input="once more").stop_reason.stop_reason == "end_turn"


def test_cancel_a_send_in_flight_through_letta_client_1_12(letta_1_12: Any, emulator: str, letta: Letta) -> None:
    agent_id = _pausing_agent(letta, emulator)
    answers: list[Any] = []
    sending = threading.Thread(
        target=lambda: answers.append(letta_1_12.agents.messages.create(agent_id=agent_id, input="wait a while"))
    )
    sending.start()
    try:
        _wait_for(lambda: _model_calls(emulator) == 1, "the send never called the model")
        (run,) = list(islice(letta.runs.list(agent_id=agent_id), 10))
        assert letta_1_12.agents.messages.cancel(agent_id, run_ids=[run.id]) == {run.id: "cancelled"}
        _answer(emulator, "here now")
        answer = letta_1_12.agents.messages.create(agent_id=agent_id, input="still there?")
        assert answer.stop_reason.stop_reason == "end_turn"
    finally:
        sending.join(timeout=60)
    # The send in flight answers once its tool returns: cancelled, with nothing of its step.
    (cut,) = answers
    assert cut.stop_reason.stop_reason == "cancelled"
    assert [m.message_type for m in cut.messages] == []
    assert letta.runs.retrieve(run.id).status == "cancelled"
    with pytest.raises(letta_client.ConflictError):  # nothing of it runs any more: Letta's 409
        letta.agents.messages.cancel(agent_id=agent_id)


def _troubles(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the server (a thread of this process) logged as going wrong: a failed run, a traceback."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_deleting_an_agent_during_a_streamed_step_ends_the_stream_cleanly(
    letta: Letta, emulator: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    agent_id = _pausing_agent(letta, emulator)
    with letta.agents.messages.create(agent_id, input="wait a while", streaming=True) as stream:
        chunks = iter(stream)
        first = next(chunks)  # the input, written
        assert first.message_type == "user_message"
        _wait_for(lambda: _model_calls(emulator) == 1, "the stream never called the model")
        letta.agents.delete(agent_id)  # while its tool runs
        rest = list(chunks)
    # Letta's end of a cancelled run, no error event: the stop reason, then the usage.
    assert [c.message_type for c in rest] == ["stop_reason", "usage_statistics"]
    assert rest[0].stop_reason == "cancelled"  # type: ignore[union-attr]
    # The agent's runs went with it; nothing of the step was written after.
    with pytest.raises(letta_client.NotFoundError):
        letta.runs.retrieve(first.run_id)  # type: ignore[arg-type]
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.retrieve(agent_id)
    assert _model_calls(emulator) == 1
    assert _troubles(caplog) == []


def test_deleting_an_agent_during_a_send_answers_it_cancelled(
    letta: Letta, emulator: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    agent_id = _pausing_agent(letta, emulator)
    answers: list[Any] = []
    sending = threading.Thread(
        target=lambda: answers.append(letta.agents.messages.create(agent_id=agent_id, input="wait a while"))
    )
    sending.start()
    try:
        _wait_for(lambda: _model_calls(emulator) == 1, "the send never called the model")
        letta.agents.delete(agent_id)
    finally:
        sending.join(timeout=60)
    (answer,) = answers
    assert answer.stop_reason.stop_reason == "cancelled"
    assert answer.messages == []
    assert _troubles(caplog) == []


def test_deleting_an_agent_during_a_background_run_ends_the_run(
    letta: Letta, emulator: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    agent_id = _pausing_agent(letta, emulator)
    run = letta.agents.messages.create_async(agent_id=agent_id, input="wait a while")
    _wait_for(lambda: _model_calls(emulator) == 1, "the run never called the model")
    letta.agents.delete(agent_id)
    with pytest.raises(letta_client.NotFoundError):
        letta.runs.retrieve(run.id)
    time.sleep(PAUSE_SECONDS + 1)  # its tool (a real process) ends; the step then stops, calling nothing more
    assert _model_calls(emulator) == 1
    # The same id names nothing still: no step of the deleted agent came back to life.
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.retrieve(agent_id)
    assert all(r.id != run.id for r in islice(letta.runs.list(), 50))
    assert _troubles(caplog) == []


def _run_json(http: httpx.Client, run_id: str) -> dict[str, Any]:
    found = http.get(f"/v1/messages/batches/{run_id}")
    found.raise_for_status()
    body: dict[str, Any] = found.json()
    return body


def test_cancel_one_agent_of_a_batch_run_on_a_live_server(letta: Letta, http: httpx.Client, emulator: str) -> None:
    members = [
        letta.agents.create(
            agent_type="memgpt_v2_agent",
            name=f"member-{i}",
            model=MODEL,
            memory_blocks=[{"label": "human", "value": "?"}],
        ).id
        for i in range(3)
    ]
    leaving = members[1]
    # The provider takes a while over the batch: the cancel and a send land while it runs.
    httpx.post(f"{emulator}/_emulator/config", json={"seconds_to_end": 8}).raise_for_status()
    run = letta.batches.create(
        requests=[{"agent_id": a, "messages": [{"role": "user", "content": "hello"}]} for a in members]
    )

    def submitted() -> bool:
        batches = _run_json(http, run.id)["progress"]["provider_batches"]
        return bool(batches) and batches[0]["status"] == "running"

    _wait_for(submitted, "the run's first step was never submitted")
    assert letta.agents.messages.cancel(agent_id=leaving, run_ids=[run.id]) == {run.id: "cancelled"}
    during = _run_json(http, run.id)
    assert during["progress"]["provider_batches"][0]["status"] == "running"  # (the cancel came first)
    assert during["progress"]["agents"] == {"running": 2, "finished": 0, "failed": 0, "cancelled": 1}
    # The agent takes a send at once, while the provider still works on its old request.
    answer = letta.agents.messages.create(agent_id=leaving, input="still there?")
    assert answer.stop_reason.stop_reason == "end_turn"
    after_send = _kinds(letta, leaving)

    _wait_for(lambda: _run_json(http, run.id)["status"] not in ("created", "running"), "the run never ended")
    ended = _run_json(http, run.id)
    assert ended["status"] == "completed"
    assert ended["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 0, "cancelled": 1}
    assert _kinds(letta, leaving) == after_send  # the provider's answer to its batch request: never applied
    for member in (members[0], members[2]):
        assert "assistant_message" in _kinds(letta, member)
