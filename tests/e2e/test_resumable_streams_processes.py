"""Background streams across ``nightshift serve`` processes on one PostgreSQL database.

A stream begun on one process is resumed on another while the run goes on (the reader follows it
through the database); a process killed while its background run steps leaves a run that a
resuming client sees end, failed with the reason, once the dead process's lease has expired
(found by the reader, or by the next server to start), and an agent free for the next send.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.letta_client_1_12 import letta_client_1_12
from support.processes import Server, Servers, server_environment
from support.slow_lookups import script_lookups, slow_lookup_source

pytestmark = [pytest.mark.parametrize("db_url", ["postgresql"], indirect=True), pytest.mark.slow]

MODEL = "anthropic/claude-3-5-haiku-20241022"
LEASE_SECONDS = 2.0
SLEEP_SECONDS = 1.5
SLOW_TOOL = slow_lookup_source(SLEEP_SECONDS)
ASK = "Please look up the orders"
PASSWORD = "streams-password"


@pytest.fixture
def servers(db_url: str, tmp_path: Path, emulator: str) -> Iterator[Servers]:
    env = server_environment(
        db_url, tmp_path / "home", NIGHTSHIFT_LEASE_SECONDS=str(LEASE_SECONDS), NIGHTSHIFT_SERVER_PASSWORD=PASSWORD
    )
    group = Servers(env, tmp_path)
    yield group
    group.kill_all()  # what the test checks is done: a graceful stop would only be waited for


def client(server: Server) -> Any:
    return letta_client_1_12().Letta(base_url=server.base_url, api_key=PASSWORD, max_retries=0, timeout=60)


def script(emulator: str, *orders: str) -> None:
    """The emulator's next answers: one slow lookup per order, then the reply."""
    script_lookups(emulator, orders, "Done.")


def new_agent(letta: Any) -> str:
    tool = letta.tools.create(source_code=SLOW_TOOL)
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="clerk",
        model=MODEL,
        tool_ids=[tool.id],
        memory_blocks=[{"label": "human", "value": "?"}],
    )
    return str(agent.id)


def dumped(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c.model_dump(mode="json", exclude_none=True) for c in chunks]


def begin(letta: Any, agent_id: str, count: int) -> list[Any]:
    """Start a background stream and read its first ``count`` chunks; then the connection drops."""
    received: list[Any] = []
    with letta.agents.messages.create(
        agent_id, input=ASK, streaming=True, background=True, include_pings=False
    ) as stream:
        for chunk in stream:
            received.append(chunk)
            if len(received) == count:
                break
    return received


async def test_a_stream_resumes_on_another_process_while_the_run_goes_on(servers: Servers, emulator: str) -> None:
    first, second = await servers.start("A"), await servers.start("B")
    with client(first) as on_a, client(second) as on_b:
        agent_id = new_agent(on_a)
        script(emulator, "B-2", "C-3")
        received = begin(on_a, agent_id, 3)
        run_id = received[0].run_id
        assert on_b.runs.retrieve(run_id).status == "running", "resumed while A still steps the run"

        with on_b.runs.messages.stream(run_id, starting_after=received[-1].seq_id, include_pings=False) as stream:
            rest = list(stream)
        with on_a.runs.messages.stream(run_id, include_pings=False) as stream:
            everything = list(stream)

    assert dumped(received + rest) == dumped(everything)
    assert everything[-2].stop_reason == "end_turn" and everything[-1].step_count == 3
    assert [c.seq_id for c in everything[:-2]] == list(range(1, len(everything) - 1))


async def test_a_run_whose_process_died_ends_its_stream_failed(servers: Servers, emulator: str) -> None:
    doomed = await servers.start("A")
    with client(doomed) as letta:
        agent_id = new_agent(letta)
        script(emulator, "B-2", "C-3", "D-4")
        received = begin(letta, agent_id, 1)  # the input; the first lookup sleeps
    run_id = received[0].run_id
    doomed.kill()

    again = await servers.start("A2")
    sdk = letta_client_1_12()
    with client(again) as letta:
        resumed: list[Any] = []
        with (
            pytest.raises(sdk.APIStatusError) as caught,
            letta.runs.messages.stream(run_id, starting_after=1, include_pings=False) as stream,
        ):
            resumed.extend(stream)
        # What the dead process stored is there once, numbered on; then the run's end.
        assert [c.seq_id for c in resumed[:-1]] == list(range(2, len(resumed) + 1))
        assert resumed[-1].message_type == "stop_reason" and resumed[-1].stop_reason == "error"
        error = caught.value.body
        assert isinstance(error, dict) and error["message_type"] == "error_message" and error["run_id"] == run_id
        assert "stopped" in error["message"]

        run = letta.runs.retrieve(run_id)
        assert run.status == "failed" and run.stop_reason == "error"

        # The dead process's hold on the agent went with it: the next send steps the agent.
        script(emulator)
        reply = letta.agents.messages.create(agent_id, input="Anything new?")
        assert reply.stop_reason.stop_reason == "end_turn"


async def test_a_run_stopped_with_its_server_ends_its_stream_failed(servers: Servers, emulator: str) -> None:
    stopping = await servers.start("A")
    with client(stopping) as letta:
        agent_id = new_agent(letta)
        script(emulator, "B-2", "C-3", "D-4")
        received = begin(letta, agent_id, 1)
    stopping.stop()  # SIGINT: the process fails the runs it will not finish, as it shuts down

    sdk = letta_client_1_12()
    with client(await servers.start("B")) as letta:
        resumed: list[Any] = []
        with (
            pytest.raises(sdk.APIStatusError) as caught,
            letta.runs.messages.stream(received[0].run_id, starting_after=1, include_pings=False) as stream,
        ):
            resumed.extend(stream)
        assert resumed[-1].message_type == "stop_reason" and resumed[-1].stop_reason == "error"
        error = caught.value.body
        assert isinstance(error, dict) and "the server stopped while the run was stepping" in error["message"]
        assert letta.runs.retrieve(received[0].run_id).status == "failed"


async def test_a_live_server_fails_the_run_of_a_dead_one_unasked(servers: Servers, emulator: str) -> None:
    doomed, survivor = await servers.start("A"), await servers.start("B")
    with client(doomed) as letta:
        agent_id = new_agent(letta)
        script(emulator, "B-2", "C-3", "D-4", "E-5")
        run_id = begin(letta, agent_id, 1)[0].run_id
    doomed.kill()

    with client(survivor) as letta:
        # Nobody reads the stream and no server starts: B finds the lease expired by itself.
        deadline = time.monotonic() + LEASE_SECONDS * 5 + 10
        while (run := letta.runs.retrieve(run_id)).status == "running":
            assert time.monotonic() < deadline, "the dead process's run is still running"
            time.sleep(0.2)
        assert run.status == "failed" and "stopped" in run.metadata["error"]
