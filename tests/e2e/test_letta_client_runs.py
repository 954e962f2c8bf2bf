"""letta-client 1.7.0 sending messages (every option), async sends and ``runs.*`` against a real server.

The module's server (``tests/e2e/conftest.py``) runs on SQLite and on PostgreSQL, the emulator as
provider, each test in an organization of its own (the restarts have servers of their own);
the emulator's scripted model calls the custom tool a message names, then ``send_message``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice
from pathlib import Path
from typing import Any

import httpx
import letta_client
import pytest
from letta_client import Letta
from letta_client.types.agents import ToolCallMessage

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.domain.agent_runs import AgentRun, AgentRunStatus
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator.config import ScriptedReply, ScriptedToolCall
from nightshift.ids import new_id
from nightshift.serving import running_server
from nightshift.store import agent_runs as agent_run_store
from nightshift.store import agents as agent_store
from nightshift.store.db import opened
from support.runs import LOOKUP_TOOL

MODEL = "anthropic/claude-3-5-haiku-20241022"
ASK = "Please use lookup_order for A-17"

# The tool runs in the server's sandbox, a real process: its sleep keeps a run stepping while the
# test cancels it or stops the server (no clock of the server's can).
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


def _settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(
        home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, callback_allow_private=True
    )


@pytest.fixture(scope="module")
def server_options() -> dict[str, Any]:
    """The module's server calls back to a receiver on loopback."""
    return {"callback_allow_private": True}


def _script(emulator: str, *replies: ScriptedReply) -> None:
    body = {"custom_id": "*", "replies": [r.model_dump(mode="json") for r in replies]}
    httpx.post(f"{emulator}/_emulator/script", json=body).raise_for_status()


def _reset(emulator: str) -> None:
    """Forget the replies still scripted (a cancelled or cut-off run leaves some)."""
    httpx.post(f"{emulator}/_emulator/reset", json={}).raise_for_status()


def _call(name: str, *, heartbeat: bool, **arguments: Any) -> ScriptedReply:
    return ScriptedReply(tool_call=ScriptedToolCall(name=name, arguments=arguments, request_heartbeat=heartbeat))


def _agent(letta: Letta, *tools: str) -> str:
    ids = [letta.tools.create(source_code=source).id for source in tools]
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="clerk",
        model=MODEL,
        tool_ids=ids,
        memory_blocks=[{"label": "human", "value": "?"}],
    )
    return agent.id


def _wait_ended(letta: Letta, run_id: str) -> Any:
    deadline = time.monotonic() + 30
    while (run := letta.runs.retrieve(run_id)).status in ("created", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.05)  # waits for the server (another thread) to step the run, not for time to pass
    return run


class _Receiver:
    """A loopback HTTP server that keeps the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers["Content-Length"])
                received.append(json.loads(self.rfile.read(size)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/done"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_send_returns_the_new_messages_of_one_run(letta: Letta) -> None:
    agent_id = _agent(letta, LOOKUP_TOOL)
    response = letta.agents.messages.create(
        agent_id=agent_id, messages=[{"role": "user", "content": ASK, "otid": "my-own-id-1"}]
    )
    messages = response.messages
    assert [m.message_type for m in messages] == [
        "reasoning_message",
        "tool_call_message",
        "tool_return_message",
        "reasoning_message",
        "assistant_message",
        "tool_return_message",
    ]
    assert messages[1].tool_call.name == "lookup_order"  # type: ignore[union-attr]
    assert "A-17" in messages[2].tool_return  # type: ignore[union-attr]
    assert isinstance(messages[4].content, str) and messages[4].content  # type: ignore[union-attr]
    run_ids = {m.run_id for m in messages}
    assert len(run_ids) == 1
    (run_id,) = run_ids
    assert run_id is not None and run_id.startswith("run-")
    assert all(m.step_id and m.step_id.startswith("step-") for m in messages)
    assert messages[0].step_id == messages[2].step_id != messages[3].step_id
    otids = [m.otid for m in messages]
    assert None not in otids and len(set(otids)) == len(otids)

    # The input keeps its otid and is tied to the run too.
    stored = list(islice(letta.agents.messages.list(agent_id, order="desc", limit=20), 20))
    (mine,) = [m for m in stored if m.message_type == "user_message" and m.otid == "my-own-id-1"]
    assert mine.run_id == run_id and mine.content == ASK

    run = letta.runs.retrieve(run_id)
    assert (run.status, run.background, run.stop_reason, run.agent_id) == ("completed", False, "end_turn", agent_id)
    assert run.completed_at is not None
    assert run.request_config is not None and run.request_config.use_assistant_message is True
    steps = list(islice(letta.runs.steps.list(run_id, order="asc"), 10))
    assert [s.id for s in steps] == [messages[0].step_id, messages[3].step_id]
    assert all(s.run_id == run_id and s.model and s.prompt_tokens and s.completion_tokens for s in steps)
    usage = letta.runs.usage.retrieve(run_id)
    assert usage.prompt_tokens == sum(s.prompt_tokens or 0 for s in steps) == response.usage.prompt_tokens
    assert usage.completion_tokens == response.usage.completion_tokens
    assert usage.total_tokens == response.usage.total_tokens


def test_send_options_change_what_is_shown(letta: Letta, emulator: str) -> None:
    agent_id = _agent(letta, LOOKUP_TOOL)

    # Without the assistant message, send_message is a tool call with its tool return.
    plain = letta.agents.messages.create(agent_id=agent_id, input=ASK, use_assistant_message=False)
    kinds = [m.message_type for m in plain.messages]
    assert "assistant_message" not in kinds
    calls = [m.tool_call.name for m in plain.messages if isinstance(m, ToolCallMessage)]
    assert calls == ["lookup_order", "send_message"]
    assert kinds.count("tool_return_message") == 2

    # Only the types asked for.
    only = letta.agents.messages.create(
        agent_id=agent_id, input=ASK, include_return_message_types=["assistant_message", "tool_return_message"]
    )
    assert [m.message_type for m in only.messages] == [
        "tool_return_message",
        "assistant_message",
        "tool_return_message",
    ]

    # Another tool and argument as the assistant's voice.
    _script(
        emulator,
        _call("lookup_order", heartbeat=True, order_id="Z-9"),
        _call("send_message", heartbeat=False, message="done"),
    )
    other = letta.agents.messages.create(
        agent_id=agent_id,
        input=ASK,
        assistant_message_tool_name="lookup_order",
        assistant_message_tool_kwarg="order_id",
    )
    shown = [
        (m.message_type, getattr(m, "content", None)) for m in other.messages if m.message_type != "reasoning_message"
    ]
    assert shown[0] == ("assistant_message", "Z-9")
    assert [kind for kind, _ in shown[1:]] == ["tool_return_message", "tool_call_message", "tool_return_message"]
    run = letta.runs.retrieve(other.messages[0].run_id or "")
    assert run.request_config is not None
    assert run.request_config.assistant_message_tool_name == "lookup_order"
    assert run.request_config.assistant_message_tool_kwarg == "order_id"
    # The run's messages are shown as its send asked.
    listed = list(islice(letta.runs.messages.list(run.id), 50))
    assert [m.message_type for m in listed].count("assistant_message") == 1
    assert listed[0].message_type == "user_message"


def test_bad_sends_are_refused_with_nothing_written(letta: Letta) -> None:
    agent_id = _agent(letta)
    before = list(islice(letta.agents.messages.list(agent_id, limit=100), 100))
    with pytest.raises(letta_client.UnprocessableEntityError):
        letta.agents.messages.create(agent_id=agent_id, input="hi", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(letta_client.UnprocessableEntityError):
        letta.agents.messages.create(agent_id=agent_id, input="hi", include_return_message_types=["nonsense"])  # type: ignore[list-item]
    with pytest.raises(letta_client.UnprocessableEntityError):
        letta.agents.messages.create_async(agent_id=agent_id, input="hi", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(letta_client.UnprocessableEntityError):
        letta.agents.messages.create_async(agent_id=agent_id, input="   ")
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.messages.create_async(agent_id="agent-00000000-0000-0000-0000-000000000000", input="hi")
    with pytest.raises(letta_client.NotFoundError):
        letta.runs.retrieve("run-00000000-0000-0000-0000-000000000000")
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.messages.cancel(agent_id="agent-00000000-0000-0000-0000-000000000000")
    assert list(islice(letta.agents.messages.list(agent_id, limit=100), 100)) == before
    assert list(islice(letta.runs.list(agent_id=agent_id), 10)) == []


def test_async_send_runs_in_the_background_and_calls_back(letta: Letta) -> None:
    agent_id = _agent(letta, LOOKUP_TOOL)
    receiver = _Receiver()
    try:
        run = letta.agents.messages.create_async(agent_id=agent_id, input=ASK, callback_url=receiver.url)
        assert run.id.startswith("run-") and run.status == "created" and run.background is True
        assert run.callback_url == receiver.url
        ended = _wait_ended(letta, run.id)
        assert (ended.status, ended.stop_reason) == ("completed", "end_turn")
        deadline = time.monotonic() + 30
        while not receiver.received or letta.runs.retrieve(run.id).callback_status_code is None:
            assert time.monotonic() < deadline, "no callback"
            time.sleep(0.05)  # waits for the server's background task to POST and record the callback
    finally:
        receiver.close()
    (body,) = receiver.received
    assert (body["job_id"], body["status"]) == (run.id, "completed")
    called = letta.runs.retrieve(run.id)
    assert called.callback_status_code == 204 and called.callback_sent_at is not None and not called.callback_error

    messages = list(islice(letta.runs.messages.list(run.id, limit=3), 50))
    kinds = [m.message_type for m in messages]
    assert kinds[0] == "user_message" and messages[0].content == ASK  # type: ignore[union-attr]
    assert kinds.count("user_message") == 2  # the input and the heartbeat between the two steps
    assert "tool_call_message" in kinds and kinds[-2:] == ["assistant_message", "tool_return_message"]
    assert {m.run_id for m in messages} == {run.id}
    steps = list(islice(letta.runs.steps.list(run.id, order="asc"), 10))
    assert len(steps) == 2
    assert {m.step_id for m in messages} == {s.id for s in steps}
    usage = letta.runs.usage.retrieve(run.id)
    assert usage.total_tokens == sum((s.prompt_tokens or 0) + (s.completion_tokens or 0) for s in steps) > 0

    sync = letta.agents.messages.create(agent_id=agent_id, input=ASK)
    sync_run = sync.messages[0].run_id
    listed = [r.id for r in islice(letta.runs.list(agent_id=agent_id), 10)]
    assert listed == [sync_run, run.id]  # newest first
    assert [r.id for r in islice(letta.runs.list(agent_id=agent_id, order="asc"), 10)] == [run.id, sync_run]
    assert [r.id for r in islice(letta.runs.list(agent_id=agent_id, background=True), 10)] == [run.id]
    assert [r.id for r in islice(letta.runs.list(agent_ids=[agent_id], background=False), 10)] == [sync_run]
    assert [r.id for r in islice(letta.runs.list(agent_id=agent_id, active=True), 10)] == []
    assert [r.id for r in islice(letta.runs.list(statuses=["failed"]), 10)] == []
    paged = [r.id for r in islice(letta.runs.list(agent_id=agent_id, limit=1), 10)]
    assert paged == listed


def test_cancel_stops_a_background_run(letta: Letta, emulator: str) -> None:
    agent_id = _agent(letta, PAUSE_TOOL)
    _script(emulator, *[_call("pause", heartbeat=True, seconds=0.5) for _ in range(5)])
    run = letta.agents.messages.create_async(agent_id=agent_id, input="wait five times")
    assert letta.agents.messages.cancel(agent_id=agent_id, run_ids=[run.id]) == {run.id: "cancelled"}
    cancelled = letta.runs.retrieve(run.id)
    assert (cancelled.status, cancelled.stop_reason) == ("cancelled", "cancelled")
    assert cancelled.completed_at is not None
    # The agent is free again once the run has stopped at its next step: a send then goes through.
    _reset(emulator)
    _script(emulator, _call("send_message", heartbeat=False, message="hello"))
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = letta.agents.messages.create(agent_id=agent_id, input="still there?")
            break
        except letta_client.ConflictError:
            assert time.monotonic() < deadline, "the cancelled run never let go of the agent"
            time.sleep(0.1)  # waits for the run's sandbox call (a real process) to end and the run to stop
    assert [m.message_type for m in answer.messages][-2] == "assistant_message"
    assert len(list(islice(letta.runs.steps.list(run.id), 10))) <= 1
    assert letta.runs.retrieve(run.id).status == "cancelled"
    # Cancelling again finds nothing open: Letta's 409.
    with pytest.raises(letta_client.ConflictError):
        letta.agents.messages.cancel(agent_id=agent_id)


def test_a_batch_run_is_a_run(letta: Letta) -> None:
    agent_id = _agent(letta, LOOKUP_TOOL)
    batch = letta.batches.create(requests=[{"agent_id": agent_id, "messages": [{"role": "user", "content": ASK}]}])
    ended = _wait_ended(letta, batch.id)
    assert ended.status == "completed" and ended.agent_id == agent_id and ended.background is True
    assert batch.id in [r.id for r in islice(letta.runs.list(), 20)]
    assert batch.id in [r.id for r in islice(letta.runs.list(agent_id=agent_id), 20)]
    assert batch.id not in [r.id for r in islice(letta.runs.list(background=False), 20)]
    messages = list(islice(letta.runs.messages.list(batch.id), 50))
    assert messages[0].message_type == "user_message" and messages[-2].message_type == "assistant_message"
    assert letta.runs.usage.retrieve(batch.id).total_tokens
    assert list(islice(letta.runs.steps.list(batch.id), 10)) == []


def test_a_background_run_cut_off_by_a_shutdown_is_failed(tmp_path: Path, db_url: str, emulator: str) -> None:
    settings = _settings(tmp_path, db_url)
    with running_server(create_app(settings)) as url, Letta(base_url=url, max_retries=0, timeout=30) as letta:
        agent_id = _agent(letta, PAUSE_TOOL)
        _script(emulator, *[_call("pause", heartbeat=True, seconds=1) for _ in range(20)])
        run = letta.agents.messages.create_async(agent_id=agent_id, input="wait and wait")
    with running_server(create_app(settings)) as url, Letta(base_url=url, max_retries=0, timeout=30) as letta:
        stopped = letta.runs.retrieve(run.id)
        assert (stopped.status, stopped.stop_reason) == ("failed", "error")
        # The agent is not left held: a send goes through.
        _reset(emulator)
        _script(emulator, _call("send_message", heartbeat=False, message="back"))
        answer = letta.agents.messages.create(agent_id=agent_id, input="hello again")
        assert answer.messages[-2].message_type == "assistant_message"


async def _leave_running(db_url: str, agent_id: str, *, held: bool) -> str:
    """What a server process that crashed mid-run leaves: a running run (its agent still held or not)."""
    now = datetime.now(UTC)
    run = AgentRun(
        id=new_id("run"),
        organization_id=DEFAULT_ORG_ID,
        agent_id=agent_id,
        status=AgentRunStatus.RUNNING,
        background=True,
        created_at=now,
        updated_at=now,
    )
    async with opened(db_url) as engine, engine.begin() as conn:
        await agent_run_store.insert_run(conn, run)
        if held:
            await agent_store.hold_for_sync_step(conn, agent_id, now, now + timedelta(minutes=15))
    return run.id


def test_a_crash_left_run_is_failed_at_the_next_start(tmp_path: Path, db_url: str, emulator: str) -> None:
    settings = _settings(tmp_path, db_url)
    with running_server(create_app(settings)) as url, Letta(base_url=url, max_retries=0, timeout=30) as letta:
        lost, busy = _agent(letta), _agent(letta)
    lost_run = asyncio.run(_leave_running(db_url, lost, held=False))
    # Another process may still be stepping this one: its agent is held, and its run stays.
    busy_run = asyncio.run(_leave_running(db_url, busy, held=True))
    with running_server(create_app(settings)) as url, Letta(base_url=url, max_retries=0, timeout=30) as letta:
        failed = letta.runs.retrieve(lost_run)
        assert (failed.status, failed.stop_reason) == ("failed", "error")
        assert failed.metadata is not None and "server stopped" in str(failed.metadata["error"])
        assert letta.runs.retrieve(busy_run).status == "running"
        assert [r.id for r in islice(letta.runs.list(active=True), 10)] == [busy_run]
