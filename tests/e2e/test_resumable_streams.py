"""Background streams with letta-client 1.12.1: numbered chunks, a stream cut and resumed with
``runs.messages.stream(run_id, starting_after=...)``, a run that goes on without its client, pings.

One server per module and database (SQLite and PostgreSQL); the emulator answers, scripted so
that the agent calls a tool that sleeps: the run lasts long enough to leave it and come back.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from nightshift.emulator.config import ScriptedError, ScriptedReply, ScriptedToolCall
from support.letta_client_1_12 import letta_client_1_12
from support.slow_lookups import script_lookups, slow_lookup_source

MODEL = "anthropic/claude-3-5-haiku-20241022"
PING_SECONDS = 0.13
SLEEP_SECONDS = 0.4
SLOW_TOOL = slow_lookup_source(SLEEP_SECONDS)
ASK = "Please look up B-2 and C-3"


@pytest.fixture(scope="module")
def server_options() -> dict[str, Any]:
    """Pings come soon, so that a test sees them while a tool sleeps."""
    return {"stream_ping_seconds": PING_SECONDS}


@pytest.fixture
def agent_id(letta_1_12: Any, emulator: str) -> str:
    """An agent with the slow tool, scripted to look up two orders (one step each), then answer."""
    tool = letta_1_12.tools.create(source_code=SLOW_TOOL)
    agent = letta_1_12.agents.create(
        agent_type="memgpt_v2_agent",
        name="clerk",
        model=MODEL,
        tool_ids=[tool.id],
        memory_blocks=[{"label": "human", "value": "?"}],
    )
    script(emulator, lookups=("B-2", "C-3"))
    return str(agent.id)


def script(emulator: str, *, lookups: tuple[str, ...]) -> None:
    """The emulator's next answers: one slow lookup per order, then the reply."""
    script_lookups(emulator, lookups, "Both shipped.")


def dumped(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c.model_dump(mode="json", exclude_none=True) for c in chunks]


def seq_of(chunk: Any) -> int:
    """A chunk's seq_id: a field of the messages, an extra of the stop reason and the usage."""
    extra = chunk.model_extra or {}
    return int(extra["seq_id"] if "seq_id" in extra else chunk.seq_id)


def no_pings(chunks: list[Any]) -> list[Any]:
    return [c for c in chunks if c.message_type != "ping"]


def wait_ended(letta: Any, run_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = letta.runs.retrieve(run_id)
        if run.status not in ("created", "running"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} still {run.status} after {timeout} s")


def test_a_stream_cut_and_resumed_gives_every_chunk_once(letta_1_12: Any, agent_id: str) -> None:
    received: list[Any] = []
    with letta_1_12.agents.messages.create(
        agent_id, input=ASK, streaming=True, background=True, stream_tokens=True
    ) as stream:
        for chunk in stream:
            received.append(chunk)
            if len(received) == 4:
                break  # the connection drops
    run_id = received[0].run_id
    assert [c.seq_id for c in received] == [1, 2, 3, 4]

    with letta_1_12.runs.messages.stream(run_id, starting_after=received[-1].seq_id, include_pings=False) as stream:
        rest = list(stream)
    with letta_1_12.runs.messages.stream(run_id, include_pings=False) as stream:
        everything = list(stream)

    assert dumped(received + rest) == dumped(everything)
    assert [c.seq_id for c in everything[:-2]] == list(range(1, len(everything) - 1))
    *messages, stop, usage = everything
    assert stop.message_type == "stop_reason" and stop.stop_reason == "end_turn"
    assert usage.message_type == "usage_statistics" and usage.step_count == 3
    assert (stop.model_extra, usage.model_extra) == (
        {"run_id": run_id, "seq_id": len(messages) + 1},
        {"run_id": run_id, "seq_id": len(messages) + 2},
    )
    assert {c.run_id for c in messages} == {run_id}
    kinds = [c.message_type for c in messages]
    assert kinds.count("tool_return_message") == 3 and kinds[-2:] == ["assistant_message", "tool_return_message"]

    # Joined, the stream's pieces are the run's messages as stored.
    stored = letta_1_12.runs.messages.list(run_id)
    said = "".join(c.content for c in messages if c.message_type == "assistant_message")
    assert said == "Both shipped." == next(m.content for m in stored if m.message_type == "assistant_message")
    assert letta_1_12.runs.retrieve(run_id).status == "completed"


def test_resume_from_any_chunk(letta_1_12: Any, agent_id: str) -> None:
    with letta_1_12.agents.messages.create(agent_id, input=ASK, streaming=True, background=True) as stream:
        everything = no_pings(list(stream))
    run_id = everything[0].run_id
    last = seq_of(everything[-1])
    assert last == len(everything)
    for after in (0, 1, len(everything) // 2, last - 1, last, last + 1, last + 5):  # last + 1: [DONE]
        with letta_1_12.runs.messages.stream(run_id, starting_after=after, include_pings=False) as stream:
            assert dumped(list(stream)) == dumped(everything[after:])


def test_a_background_run_goes_on_after_its_client_leaves(letta_1_12: Any, agent_id: str) -> None:
    with letta_1_12.agents.messages.create(agent_id, input=ASK, streaming=True, background=True) as stream:
        first = next(iter(stream))  # the input; then the client goes away during the first lookup
    assert first.message_type == "user_message" and first.seq_id == 1

    run = wait_ended(letta_1_12, first.run_id)
    assert run.status == "completed" and run.stop_reason == "end_turn"
    with letta_1_12.runs.messages.stream(first.run_id, starting_after=1, include_pings=False) as stream:
        rest = list(stream)
    assert rest[-1].message_type == "usage_statistics" and rest[-1].step_count == 3
    returns = [str(c.tool_return) for c in rest if c.message_type == "tool_return_message"]
    assert ["B-2", "C-3"] == [o for r in returns for o in ("B-2", "C-3") if f"order {o} shipped" in r]


def test_pings_come_only_when_asked(letta_1_12: Any, agent_id: str) -> None:
    with letta_1_12.agents.messages.create(
        agent_id, input=ASK, streaming=True, background=True, include_pings=True
    ) as stream:
        live = list(stream)
    pings = [c for c in live if c.message_type == "ping"]
    assert pings, f"a ping every {PING_SECONDS} s while a tool sleeps {SLEEP_SECONDS} s"
    assert all(p.id and p.date and p.seq_id is None for p in pings), "a ping is not part of the stream"

    run_id = live[0].run_id
    with letta_1_12.runs.messages.stream(run_id, include_pings=False) as stream:
        replayed = list(stream)
    assert dumped(replayed) == dumped(no_pings(live))
    # Letta's default: pings, while the stream waits (none here: the run has ended).
    with letta_1_12.runs.messages.stream(run_id) as stream:
        assert dumped(list(stream)) == dumped(replayed)


def test_a_send_to_async_is_a_stream_too(letta_1_12: Any, agent_id: str) -> None:
    run = letta_1_12.agents.messages.create_async(agent_id, input=ASK)
    with letta_1_12.runs.messages.stream(run.id) as stream:
        chunks = no_pings(list(stream))
    assert chunks[0].message_type == "user_message" and chunks[0].content == ASK
    assert chunks[-2].stop_reason == "end_turn" and chunks[-1].step_count == 3
    assert wait_ended(letta_1_12, run.id).status == "completed"


def test_only_a_background_run_is_resumable(letta_1_12: Any, agent_id: str, http: httpx.Client) -> None:
    errors = letta_client_1_12()
    with letta_1_12.agents.messages.create(agent_id, input=ASK, streaming=True) as stream:
        chunks = list(stream)
    run_id = chunks[0].run_id
    assert [c.seq_id for c in chunks[:-2]] == list(range(1, len(chunks) - 1)), "a foreground stream is numbered too"
    # (Letta answers 400; nightshift's bad input is a 422 naming the field.)
    with pytest.raises(errors.UnprocessableEntityError, match="not created in background mode"):
        with letta_1_12.runs.messages.stream(run_id) as stream:
            list(stream)
    with pytest.raises(errors.NotFoundError):
        with letta_1_12.runs.messages.stream("run-nope") as stream:
            list(stream)
    # GET takes the options in the query; a bad one is named.
    assert http.get(f"/v1/runs/{run_id}/stream").status_code == 422
    refused = http.post(f"/v1/runs/{run_id}/stream", json={"starting_after": -1})
    assert refused.status_code == 422 and refused.json()["field"] == "starting_after"


def test_get_reads_the_stream_as_server_sent_events(letta_1_12: Any, agent_id: str, http: httpx.Client) -> None:
    run = letta_1_12.agents.messages.create_async(agent_id, input=ASK)
    wait_ended(letta_1_12, run.id)
    body = http.get(f"/v1/runs/{run.id}/stream", params={"starting_after": 2, "include_pings": False}).text
    events = [e for e in body.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    first = httpx.Response(200, content=events[0].removeprefix("data: ")).json()
    assert first["seq_id"] == 3 and first["run_id"] == run.id


def test_a_cancelled_run_ends_its_stream(letta_1_12: Any, agent_id: str) -> None:
    with letta_1_12.agents.messages.create(agent_id, input=ASK, streaming=True, background=True) as stream:
        first = next(iter(stream))
    letta_1_12.agents.messages.cancel(agent_id, run_ids=[first.run_id])
    with letta_1_12.runs.messages.stream(first.run_id, include_pings=False) as stream:
        chunks = list(stream)
    assert chunks[-1].message_type == "stop_reason" and chunks[-1].stop_reason == "cancelled"
    assert [seq_of(c) for c in chunks] == list(range(1, len(chunks) + 1))
    assert wait_ended(letta_1_12, first.run_id).status == "cancelled"


def test_letta_client_1_7_resumes_too(letta: Any, letta_1_12: Any, agent_id: str) -> None:
    with letta.agents.messages.create(agent_id, input=ASK, streaming=True, background=True) as stream:
        first = next(iter(stream))
    with letta.runs.messages.stream(first.run_id, starting_after=first.seq_id, include_pings=False) as stream:
        rest = list(stream)
    with letta_1_12.runs.messages.stream(first.run_id, include_pings=False) as stream:
        everything = list(stream)
    assert dumped([first, *rest]) == dumped(everything)
    assert everything[-2].stop_reason == "end_turn"


def test_a_provider_error_ends_the_stored_stream_as_it_ends_a_live_one(letta_1_12: Any, emulator: str) -> None:
    errors = letta_client_1_12()
    tool = letta_1_12.tools.create(source_code=SLOW_TOOL)
    agent = letta_1_12.agents.create(
        agent_type="memgpt_v2_agent",
        name="failing",
        model=MODEL,
        tool_ids=[tool.id],
        memory_blocks=[{"label": "human", "value": "?"}],
    )
    lookup = ScriptedToolCall(name="slow_lookup", arguments={"order_id": "B-2"}, request_heartbeat=True)
    refused = ScriptedReply(error=ScriptedError(type="invalid_request_error", message="prompt is too long"))
    body = {
        "custom_id": "*",
        "replies": [r.model_dump(mode="json") for r in (ScriptedReply(tool_call=lookup), refused)],
    }
    httpx.post(f"{emulator}/_emulator/script", json=body).raise_for_status()

    def read(opened: Any) -> tuple[list[Any], Any]:
        received: list[Any] = []
        with pytest.raises(errors.APIStatusError) as caught, opened as stream:
            received.extend(stream)
        return received, caught.value.body

    live, live_error = read(letta_1_12.agents.messages.create(agent.id, input=ASK, streaming=True, background=True))
    run_id = live[0].run_id
    replayed, replayed_error = read(letta_1_12.runs.messages.stream(run_id, include_pings=False))

    assert dumped(replayed) == dumped(no_pings(live)) and replayed_error == live_error
    assert replayed[-1].stop_reason == "llm_api_error"
    assert live_error["error_type"] == "llm_api_error" and "prompt is too long" in live_error["message"]
    assert (live_error["run_id"], live_error["seq_id"]) == (run_id, seq_of(replayed[-1]) + 1)
    assert wait_ended(letta_1_12, run_id).status == "failed"
