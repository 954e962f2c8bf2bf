"""A poller keeps the agents it submitted (``store/agent_cache.py``): their next step starts from
them, and sees every change made through the API meanwhile."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import event

from integration.batch.kit import CHECK_TOOL, call, calls_of, say, system_text, text_of
from nightshift.batch.worker import Worker
from nightshift.emulator import EmulatorAdmin
from support.api import create_tool, json_object
from support.clock import clock_of
from support.runs import Runs

pytestmark = pytest.mark.settings(poller=False)  # each test moves the run on, one pass at a time

RESTOCKED = CHECK_TOOL.replace('"in_stock" if item == "apple" else "sold_out"', '"restocked"')


async def _finish(runs: Runs, app: FastAPI, run_id: str) -> dict[str, Any]:
    worker: Worker = app.state.nightshift.worker
    for _ in range(20):
        run = json_object(await runs.client.get(f"/v1/messages/batches/{run_id}"))
        if run["status"] not in ("created", "running"):
            return run
        clock_of(app).advance(worker.poll_interval)
        await worker.run_once()
    raise AssertionError(f"run {run_id} still {run['status']}")


async def test_the_next_step_sees_what_changed_since_its_agent_was_kept(
    runs: Runs, admin: EmulatorAdmin, app: FastAPI
) -> None:
    tool = await create_tool(runs.client, CHECK_TOOL)
    # One agent's tool changes (and nothing of the agent itself), the other's prompt and memory.
    shopper, grocer = [await runs.agent(name, tool_ids=[tool["id"]]) for name in ("shopper", "grocer")]
    for agent in (shopper, grocer):
        await admin.script(agent["id"], call("check_stock", heartbeat=True, item="apple"), say("done"))
    run = await runs.start([{"agent_id": a["id"], "input": "any apples?"} for a in (shopper, grocer)])
    kept = app.state.nightshift.worker.parts.agents
    assert shopper["id"] in kept and grocer["id"] in kept  # as their first step was submitted

    # Meanwhile, through the API.
    changed = await runs.client.patch(f"/v1/tools/{tool['id']}", json={"source_code": RESTOCKED})
    assert changed.status_code == 200, changed.text
    changed = await runs.client.patch(f"/v1/agents/{grocer['id']}", json={"system": "You are a grocer."})
    assert changed.status_code == 200, changed.text
    human = next(b for b in grocer["memory"]["blocks"] if b["label"] == "human")
    changed = await runs.client.patch(f"/v1/blocks/{human['id']}", json={"value": "Likes pears."})
    assert changed.status_code == 200, changed.text

    done = await _finish(runs, app, run["id"])

    assert done["status"] == "completed", done
    messages = await runs.messages(run["id"])
    for agent in (shopper, grocer):
        own = [m for m in messages if m["agent_id"] == agent["id"]]
        assert [m["role"] for m in own] == ["user", "assistant", "tool", "user", "assistant", "tool"]
        assert "restocked" in text_of(own[2])  # the tool's code as edited ran
    first, second = await calls_of(admin, grocer["id"])
    assert "You are a grocer." not in system_text(first)
    assert "You are a grocer." in system_text(second) and "Likes pears." in system_text(second)


async def test_an_agent_that_manages_a_sleep_time_group_is_not_kept(runs: Runs, app: FastAPI) -> None:
    sleepy = await runs.agent("sleepy", enable_sleeptime=True)
    plain = await runs.agent("plain")
    await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (sleepy, plain)])
    kept = app.state.nightshift.worker.parts.agents
    assert plain["id"] in kept and sleepy["id"] not in kept


async def test_a_kept_agent_s_next_run_reads_neither_it_nor_its_system_message_again(
    runs: Runs, admin: EmulatorAdmin, app: FastAPI
) -> None:
    agent = await runs.agent("regular")
    await admin.script(agent["id"], say("hello"), say("hello again"))
    first = await runs.start([{"agent_id": agent["id"], "input": "hi"}])
    assert (await _finish(runs, app, first["id"]))["status"] == "completed"
    await admin.configure(polls_to_end=1000)
    system_id = (await runs.context(agent["id"]))[0]["id"]

    reads: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, parameters: Any, *_args: object) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            reads.append(f"{statement} {parameters!r}")

    engine = app.state.nightshift.engine
    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        second = await runs.start([{"agent_id": agent["id"], "input": "hi again"}])
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)

    assert [b["status"] for b in second["progress"]["provider_batches"]] == ["running"]
    assert not any("tool_links" in read for read in reads)  # the agent was not loaded
    assert not any(system_id in read for read in reads)  # nor its system message read
    (_, request) = await calls_of(admin, agent["id"])
    assert system_text(request) == system_text((await calls_of(admin, agent["id"]))[0])
