"""Per-request provider errors: the agent stops (or is retried, for transient errors); others go on."""

from __future__ import annotations

from integration.batch.kit import by_agent, call, calls_of, say
from nightshift.batch.decisions import TRANSIENT_RETRIES
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import HttpFault, ScriptedError, ScriptedReply
from support.runs import Runs


async def test_a_failed_request_stops_only_that_agent(runs: Runs, admin: EmulatorAdmin) -> None:
    bad = await runs.agent("bad")
    good = [await runs.agent(f"good{i}") for i in range(2)]
    await admin.configure(errors={bad["id"]: "invalid_request_error"})
    for agent in good:
        await admin.script(agent["id"], call("conversation_search", heartbeat=True, query="hi"), say("done"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (bad, *good)])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 1, "cancelled": 0}
    first, second = done["progress"]["provider_batches"]
    assert first["request_counts"]["errored"] == 1
    assert second["request_counts"] == {"processing": 0, "succeeded": 2, "errored": 0, "canceled": 0, "expired": 0}

    failures = done["progress"]["failures"]
    assert len(failures) == 1
    assert failures[0]["agent_id"] == bad["id"]
    assert failures[0]["step_number"] == 0
    assert failures[0]["request_status"] == "failed"
    assert "invalid_request_error" in failures[0]["error"]

    roles = by_agent(await runs.messages(run["id"]))
    assert roles[bad["id"]] == ["user"]  # no assistant or tool message for the failed agent
    for agent in good:
        assert roles[agent["id"]] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert len(await calls_of(admin, bad["id"])) == 1  # a permanent error is not retried


async def test_a_transient_error_is_retried_in_the_next_step(runs: Runs, admin: EmulatorAdmin) -> None:
    flaky = await runs.agent("flaky")
    steady = await runs.agent("steady")
    await admin.script(flaky["id"], ScriptedReply(error=ScriptedError(type="rate_limit_error")), say("made it"))
    await admin.script(steady["id"], call("conversation_search", heartbeat=True, query="x"), say("done"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (flaky, steady)])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 0, "cancelled": 0}
    assert done["progress"]["failures"] == []
    assert len(done["progress"]["provider_batches"]) == 2

    calls = await calls_of(admin, flaky["id"])
    assert len(calls) == 2
    assert calls[0]["messages"] == calls[1]["messages"]  # the same request again, nothing added
    messages = await runs.messages(run["id"], agent_id=flaky["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert "made it" in messages[1]["tool_calls"][0]["function"]["arguments"]


async def test_transient_errors_stop_the_agent_once_retries_run_out(runs: Runs, admin: EmulatorAdmin) -> None:
    overloaded = await runs.agent("overloaded")
    steady = await runs.agent("steady")
    await admin.configure(errors={overloaded["id"]: "overloaded_error"})
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (overloaded, steady)])
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 1, "cancelled": 0}
    assert len(await calls_of(admin, overloaded["id"])) == 1 + TRANSIENT_RETRIES
    assert len(done["progress"]["provider_batches"]) == 1 + TRANSIENT_RETRIES
    (failure,) = done["progress"]["failures"]
    assert failure["agent_id"] == overloaded["id"]
    assert "overloaded_error" in failure["error"]
    assert [m["role"] for m in await runs.messages(run["id"], agent_id=overloaded["id"])] == ["user"]


async def test_retries_count_for_the_whole_run_of_an_agent(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("only")
    await admin.configure(errors={agent["id"]: "rate_limit_error"})
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    done = await runs.wait(run["id"])
    assert done["status"] == "failed", done
    assert len(await calls_of(admin, agent["id"])) == 1 + TRANSIENT_RETRIES


async def test_an_expired_batch_stops_its_agents_with_the_reason(runs: Runs, admin: EmulatorAdmin) -> None:
    agents = [await runs.agent(f"late{i}") for i in range(2)]
    await admin.configure(polls_to_end=5, expire_after_polls=1)
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    done = await runs.wait(run["id"])
    assert done["status"] == "failed", done
    assert done["progress"]["agents"]["failed"] == 2
    (batch,) = done["progress"]["provider_batches"]
    assert batch["request_counts"]["expired"] == 2
    failures = done["progress"]["failures"]
    assert sorted(f["agent_id"] for f in failures) == sorted(a["id"] for a in agents)
    assert all(f["request_status"] == "expired" and "expired" in f["error"] for f in failures)
    assert by_agent(await runs.messages(run["id"])) == {a["id"]: ["user"] for a in agents}


async def test_a_refused_submission_fails_its_agents(runs: Runs, admin: EmulatorAdmin) -> None:
    agent = await runs.agent("refused")
    await admin.fault(
        HttpFault(path="/v1/messages/batches", method="POST", status=400, should_retry=False, message="bad batch")
    )
    run = await runs.start([{"agent_id": agent["id"], "input": "hello"}])
    done = await runs.wait(run["id"])
    assert done["status"] == "failed", done
    (failure,) = done["progress"]["failures"]
    assert failure["agent_id"] == agent["id"]
    assert "bad batch" in failure["error"]
    assert done["progress"]["provider_batches"][0]["error"]
