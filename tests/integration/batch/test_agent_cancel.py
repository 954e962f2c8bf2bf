"""POST /v1/agents/{id}/messages/cancel on an agent of a batch run: its part ends, the others go on.

The agent's item is closed at once (cancelled) and it takes a new send at once; what the provider
answers for it is never applied, whichever poller applies the step and whenever its results
were read; the run ends as it would have for the others, its progress and agents listing the
one cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch import application
from nightshift.batch.cancel_agent import AGENT_CANCELLED, AGENT_DELETED
from nightshift.batch.worker import Worker
from nightshift.domain.batches import ProviderBatchStatus
from nightshift.store import provider_batches as batch_store
from support.api import create_tool, json_object
from support.clock import ManualClock
from support.scripted import NORMAL_CALLS, call, say
from support.stepped import SteppedRuns

# A custom tool: it runs in the sandbox's processes, so a step's tools take a while in real time.
PAUSE_TOOL = '''
def pause(seconds: float) -> str:
    """Wait a while.

    Args:
        seconds: How long to wait.
    """
    import time

    time.sleep(seconds)
    return "waited"
'''


async def _cancel(stepped: SteppedRuns, agent_id: str, **body: Any) -> dict[str, Any]:
    return json_object(await stepped.client.post(f"/v1/agents/{agent_id}/messages/cancel", json=body or None))


async def _texts(stepped: SteppedRuns, agent_id: str) -> list[tuple[str, str]]:
    """The agent's stored messages as (type, id), oldest first: what changes when a step is applied."""
    return [(m["message_type"], m["id"]) for m in await stepped.context(agent_id)]


async def _agents(stepped: SteppedRuns, run_id: str) -> dict[str, dict[str, Any]]:
    found = json_object(await stepped.client.get(f"/v1/messages/batches/{run_id}/agents", params={"limit": 100}))
    return {a["agent_id"]: a for a in found["agents"]}


async def _send(stepped: SteppedRuns, agent_id: str, text: str) -> dict[str, Any]:
    """A synchronous send to the agent, answered by the scripted model's next normal reply."""
    stepped.model.script(NORMAL_CALLS, say(text))
    return json_object(await stepped.client.post(f"/v1/agents/{agent_id}/messages", json={"input": "still there?"}))


async def test_one_agent_cancelled_in_a_50_agent_run_while_the_other_49_finish(stepped: SteppedRuns) -> None:
    agents = [await stepped.agent(f"agent-{i}") for i in range(50)]
    for agent in agents:
        stepped.model.script(agent["id"], call("conversation_search", heartbeat=True, query="x"), say("done"))
    leaving = agents[17]["id"]
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    await stepped.step()  # step 0 applied for all; step 1 submitted, its answers scripted
    running = await stepped.run(run["id"])
    assert running["progress"]["agents"] == {"running": 50, "finished": 0, "failed": 0, "cancelled": 0}
    before = await _texts(stepped, leaving)

    assert await _cancel(stepped, leaving) == {run["id"]: "cancelled"}
    # Its part ended at once: the run counts it cancelled, the 49 others still run.
    cancelled = await stepped.run(run["id"])
    assert cancelled["status"] == "running"
    assert cancelled["progress"]["agents"] == {"running": 49, "finished": 0, "failed": 0, "cancelled": 1}
    listed = await _agents(stepped, run["id"])
    assert (listed[leaving]["state"], listed[leaving]["error"]) == ("cancelled", AGENT_CANCELLED)
    # ... and it takes a new message at once, while the run still steps the others.
    answer = await _send(stepped, leaving, "free again")
    assert answer["stop_reason"]["stop_reason"] == "end_turn"
    assert [m["content"] for m in answer["messages"] if m["message_type"] == "assistant_message"] == ["free again"]
    after_send = await _texts(stepped, leaving)
    assert after_send[: len(before)] == before and len(after_send) > len(before)

    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 49, "failed": 0, "cancelled": 1}
    # The provider answered its step-1 request too; that answer was never applied.
    assert len(stepped.model.calls(leaving)) == 2
    assert await _texts(stepped, leaving) == after_send
    listed = await _agents(stepped, run["id"])
    assert {a["state"] for agent_id, a in listed.items() if agent_id != leaving} == {"finished"}
    assert listed[leaving]["state"] == "cancelled"
    # The run's messages hold its two steps for the others, its first step only for it.
    stays = agents[0]["id"]
    assert len([m for m in await stepped.messages(run["id"]) if m["agent_id"] == stays]) > len(
        [m for m in await stepped.messages(run["id"]) if m["agent_id"] == leaving]
    )
    # Nothing of it runs any more: a second cancel is Letta's 409.
    bodies: tuple[dict[str, list[str]] | None, ...] = (None, {"run_ids": []})
    for body in bodies:
        again = await stepped.client.post(f"/v1/agents/{leaving}/messages/cancel", json=body)
        assert again.status_code == 409, again.text
        assert "no active runs" in again.text


async def test_results_read_before_the_cancel_are_not_applied_by_the_poller_that_takes_over(
    stepped: SteppedRuns, stepped_app: FastAPI
) -> None:
    worker: Worker = stepped_app.state.nightshift.worker
    engine: AsyncEngine = stepped_app.state.nightshift.engine
    agents = [await stepped.agent(f"agent-{i}") for i in range(3)]
    for agent in agents:
        stepped.model.script(agent["id"], say("done"))
    leaving = agents[1]["id"]
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    before = await _texts(stepped, leaving)
    async with engine.connect() as conn:
        (batch,) = await batch_store.provider_batches_of_run(conn, run["id"])
    # This poller reads the results (stored, the batch ended) and dies before it applies them.
    ended = (await application.poll(worker.parts, worker.leases, batch)).batch
    assert ended.status is ProviderBatchStatus.ENDED

    assert await _cancel(stepped, leaving, run_ids=[run["id"]]) == {run["id"]: "cancelled"}
    # Another poller takes the batch over once the dead one's lease has expired, and applies it.
    later = ManualClock(start=datetime.now(UTC))  # (the app's clock is the machine's)
    later.advance(worker.leases.lease_seconds + 1)
    other = dataclasses.replace(
        worker,
        parts=dataclasses.replace(worker.parts, clock=later),
        leases=dataclasses.replace(worker.leases, owner="elsewhere:1:other", clock=later),
    )
    assert await other.run_once() == 1
    done = await stepped.run(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 0, "cancelled": 1}
    assert await _texts(stepped, leaving) == before
    for agent in (agents[0], agents[2]):
        assert [m["message_type"] for m in await stepped.context(agent["id"])][-1] == "tool_return_message"


async def test_a_cancel_while_the_step_runs_its_tools_wins(stepped: SteppedRuns, stepped_app: FastAPI) -> None:
    """The poller has read the step and runs its tools (outside any transaction) when the cancel
    commits: what it writes is decided under the run's lock, from the items as stored then."""
    worker: Worker = stepped_app.state.nightshift.worker
    engine: AsyncEngine = stepped_app.state.nightshift.engine
    await create_tool(stepped.client, PAUSE_TOOL)
    agents = [await stepped.agent(f"agent-{i}", tools=["pause"]) for i in range(2)]
    for agent in agents:
        stepped.model.script(agent["id"], call("pause", heartbeat=True, seconds=2), say("done"))
    leaving, stays = agents[0]["id"], agents[1]["id"]
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    before = await _texts(stepped, leaving)
    async with engine.connect() as conn:
        (batch,) = await batch_store.provider_batches_of_run(conn, run["id"])
    ended = (await application.poll(worker.parts, worker.leases, batch)).batch

    applying = asyncio.create_task(application.resume(worker.parts, worker.leases, ended))
    await asyncio.sleep(0.5)  # lets the step read its items and start its tools (2 s in the sandbox)
    assert not applying.done()
    assert await _cancel(stepped, leaving) == {run["id"]: "cancelled"}
    applied = await applying
    await worker.submit_new(applied.next_batches)  # what the poller does with what the stage wrote

    assert await _texts(stepped, leaving) == before
    done = await stepped.finish(run["id"])
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 0, "cancelled": 1}
    assert await _texts(stepped, leaving) == before
    # The agent that stayed took both its steps; the one that left, none after the first.
    assert (len(stepped.model.calls(stays)), len(stepped.model.calls(leaving))) == (2, 1)


async def test_an_agent_cancelled_while_its_run_is_queued_leaves_it(stepped: SteppedRuns) -> None:
    stays, leaving, alone = [await stepped.agent(name) for name in ("stays", "leaving", "alone")]
    stepped.model.script(stays["id"], say("done"))
    queued = json_object(
        await stepped.client.post(
            "/v1/messages/batches", json={"requests": [{"agent_id": a["id"], "input": "hi"} for a in (stays, leaving)]}
        )
    )
    lone = json_object(
        await stepped.client.post("/v1/messages/batches", json={"requests": [{"agent_id": alone["id"], "input": "hi"}]})
    )
    assert await _cancel(stepped, leaving["id"]) == {queued["id"]: "cancelled"}
    # The agent left the run: it waits with one agent.
    assert (await stepped.run(queued["id"]))["progress"]["agents"]["running"] == 1
    assert await _cancel(stepped, alone["id"], run_ids=[lone["id"], "batch-unknown"]) == {
        lone["id"]: "cancelled",
        "batch-unknown": "failed",
    }
    # The run with no agent left ends cancelled; both agents take a message at once.
    assert (await stepped.run(lone["id"]))["status"] == "cancelled"
    for agent in (leaving, alone):
        answer = await _send(stepped, agent["id"], "free")
        assert answer["stop_reason"]["stop_reason"] == "end_turn"

    done = await stepped.finish(queued["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 0, "cancelled": 0}
    assert set(await _agents(stepped, queued["id"])) == {stays["id"]}
    assert stepped.model.calls(leaving["id"]) == [] and stepped.model.calls(alone["id"]) == []


async def test_cancel_names_the_runs_it_was_asked_about(stepped: SteppedRuns) -> None:
    """Letta's answer: each run id given, ``cancelled`` for one of the agent's (open or ended),
    ``failed`` for any other; a run of another agent is left as it is."""
    mine, other = await stepped.agent("mine"), await stepped.agent("other")
    stepped.model.script(mine["id"], say("done"))
    stepped.model.script(other["id"], say("done"))
    ended = await stepped.finish((await stepped.start([{"agent_id": mine["id"], "input": "hi"}]))["id"])
    theirs = await stepped.start([{"agent_id": other["id"], "input": "hi"}])
    answer = await _cancel(stepped, mine["id"], run_ids=[ended["id"], theirs["id"]])
    assert answer == {ended["id"]: "cancelled", theirs["id"]: "failed"}
    assert (await stepped.run(ended["id"]))["status"] == "completed"
    assert (await stepped.finish(theirs["id"]))["progress"]["agents"]["finished"] == 1
    missing = await stepped.client.post("/v1/agents/agent-00000000-0000-0000-0000-000000000000/messages/cancel")
    assert missing.status_code == 404, missing.text


async def test_a_run_whose_last_agents_leave_ends_without_waiting_for_the_provider(stepped: SteppedRuns) -> None:
    finishes, leaves, alone = [await stepped.agent(name) for name in ("finishes", "leaves", "alone")]
    stepped.model.script(finishes["id"], say("done"))
    for agent in (leaves, alone):
        stepped.model.script(agent["id"], call("conversation_search", heartbeat=True, query="x"), say("never"))
    pair = await stepped.start([{"agent_id": a["id"], "input": "hi"} for a in (finishes, leaves)])
    single = await stepped.start([{"agent_id": alone["id"], "input": "hi"}])
    with stepped.model.holding():
        await stepped.step()  # step 0 applied; the step-1 batches stay open at the provider
    assert len(stepped.model.held()) == 2

    for agent in (leaves, alone):
        assert len(await _cancel(stepped, agent["id"])) == 1
    # Their step-1 batches hold no open item: cancelled at the provider by the next pass, and
    # their runs end then, each as its agents ended.
    await stepped.step()
    ended_pair, ended_single = await stepped.run(pair["id"]), await stepped.run(single["id"])
    assert ended_pair["status"] == "completed"
    assert ended_pair["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 0, "cancelled": 1}
    assert ended_single["status"] == "cancelled"
    assert ended_single["progress"]["agents"] == {"running": 0, "finished": 0, "failed": 0, "cancelled": 1}
    assert ended_single["completed_at"] is not None
    for run in (ended_pair, ended_single):
        assert [b["status"] for b in run["progress"]["provider_batches"]] == ["applied", "cancelled"]


async def test_a_run_whose_last_agent_leaves_while_a_poller_holds_its_batch_ends_at_the_next_pass(
    stepped: SteppedRuns, clock: ManualClock
) -> None:
    """The cancel comes while a poller polls the batch (it holds the lease); the poller then
    lets go of it as of a batch still running, due an hour on: it is cancelled at the next pass."""
    agent = await stepped.agent("leaves-mid-poll")
    stepped.model.script(agent["id"], say("never"))
    with stepped.model.holding():
        run = await stepped.start([{"agent_id": agent["id"], "input": "hi"}])
        await stepped.step()
    worker = stepped.worker
    async with worker.engine.begin() as conn:
        (held,) = await batch_store.claim_due(
            conn,
            worker.leases.owner,
            clock.now(),
            lease_seconds=60,
            limit=1,
            endpoints=worker.parts.providers.endpoints(),
        )
    assert len(await _cancel(stepped, agent["id"])) == 1
    await worker.leases.release(held, delay=timedelta(hours=1))

    await stepped.step()
    ended = await stepped.run(run["id"])
    assert ended["status"] == "cancelled", ended["progress"]
    assert [b["status"] for b in ended["progress"]["provider_batches"]] == ["cancelled"]


async def test_an_agent_deleted_while_the_step_runs_its_tools_gets_nothing_of_it(
    stepped: SteppedRuns, stepped_app: FastAPI
) -> None:
    """As a cancel: the deletion commits while the poller runs the step's tools; the step's write,
    under the run's lock, leaves the deleted agent out and the run goes on for the other."""
    worker: Worker = stepped_app.state.nightshift.worker
    engine: AsyncEngine = stepped_app.state.nightshift.engine
    await create_tool(stepped.client, PAUSE_TOOL)
    agents = [await stepped.agent(f"agent-{i}", tools=["pause"]) for i in range(2)]
    for agent in agents:
        stepped.model.script(agent["id"], call("pause", heartbeat=True, seconds=2), say("done"))
    goes, stays = agents[0]["id"], agents[1]["id"]
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    async with engine.connect() as conn:
        (batch,) = await batch_store.provider_batches_of_run(conn, run["id"])
    ended = (await application.poll(worker.parts, worker.leases, batch)).batch

    applying = asyncio.create_task(application.resume(worker.parts, worker.leases, ended))
    await asyncio.sleep(0.5)  # lets the step read its items and start its tools (2 s in the sandbox)
    assert not applying.done()
    assert (await stepped.client.delete(f"/v1/agents/{goes}")).status_code == 200
    applied = await applying
    await worker.submit_new(applied.next_batches)

    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 0, "cancelled": 1}
    listed = await _agents(stepped, run["id"])
    assert (listed[goes]["state"], listed[goes]["error"], listed[goes]["agent_deleted"]) == (
        "cancelled",
        AGENT_DELETED,
        True,
    )
    assert [m for m in await stepped.messages(run["id"]) if m["agent_id"] == goes] == []
    assert (len(stepped.model.calls(stays)), len(stepped.model.calls(goes))) == (2, 1)
