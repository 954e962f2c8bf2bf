"""Sleep-time agents, pass by pass: a main agent's turns make its sleep-time agent due, the due
ones are gathered into a batch run of their own, and their memory edits land on the shared blocks."""

from __future__ import annotations

from typing import Any

from nightshift.batch import sleeptime
from support.api import json_list, json_object
from support.scripted import call, say
from support.stepped import SteppedRuns


async def _sleeper_of(stepped: SteppedRuns, main: dict[str, Any]) -> dict[str, Any]:
    (found,) = json_list(await stepped.client.get("/v1/agents", params={"name": f"{main['name']}-sleeptime"}))
    return dict(found)


async def test_every_fifth_turn_makes_the_sleeptime_agent_due_and_its_run_edits_the_shared_block(
    stepped: SteppedRuns,
) -> None:
    main = await stepped.agent("pal", agent_type="letta_v1_agent", enable_sleeptime=True)
    sleeper = await _sleeper_of(stepped, main)
    assert sleeper["agent_type"] == "sleeptime_agent"
    assert {b["id"] for b in main["blocks"]} <= {b["id"] for b in sleeper["blocks"]}
    assert sorted(t["name"] for t in sleeper["tools"]) == [
        "memory_finish_edits",
        "memory_insert",
        "memory_replace",
        "memory_rethink",
    ]
    assert not {t["name"] for t in main["tools"]} & {"memory_insert", "memory_replace", "core_memory_append"}

    engine, clock = stepped.worker.engine, stepped.worker.parts.clock
    for turn in range(5):
        stepped.model.script(main["id"], say(f"noted {turn}"))
        run = await stepped.start([{"agent_id": main["id"], "input": f"my favourite number is {turn}"}])
        assert (await stepped.finish(run["id"]))["status"] == "completed"
        if turn < 4:
            assert await sleeptime.gather(engine, clock) == []  # not due yet

    stepped.model.script(
        sleeper["id"],
        call("memory_insert", label="human", new_str="Favourite numbers: 0 to 4"),
        call("memory_finish_edits"),
    )
    (gathered,) = await sleeptime.gather(engine, clock)
    assert gathered.kind == "sleeptime"
    assert await sleeptime.gather(engine, clock) == []  # gathered once
    done = await stepped.finish(gathered.id)
    assert done["status"] == "completed", done

    (first, _second) = stepped.model.requests(sleeper["id"])
    transcript = first.messages[-1].text
    # A new sleeper's first request has nothing to say it will make another (no earlier task in
    # its window): nothing is written to the prompt cache that nobody might read.
    body = stepped.model.calls(sleeper["id"])[0]
    assert "cache_control" not in body["system"][-1] and "cache_control" not in body["tools"][-1]
    assert "Messages:\nuser: my favourite number is 0\nassistant: noted 0" in transcript
    assert "user: my favourite number is 4\nassistant: noted 4" in transcript
    human = json_object(await stepped.client.get(f"/v1/agents/{main['id']}/core-memory/blocks/human"))
    assert "Favourite numbers: 0 to 4" in human["value"]


async def _turns(stepped: SteppedRuns, main: dict[str, Any], count: int, *, said: str = "noted") -> None:
    for turn in range(count):
        stepped.model.script(main["id"], say(f"{said} {turn}"))
        run = await stepped.start([{"agent_id": main["id"], "input": f"turn {turn}"}])
        assert (await stepped.finish(run["id"]))["status"] == "completed"


async def test_the_main_agent_talks_on_while_its_sleeptime_batch_is_open_and_sees_the_new_memory_after(
    stepped: SteppedRuns,
) -> None:
    main = await stepped.agent("pal", agent_type="letta_v1_agent", enable_sleeptime=True)
    sleeper = await _sleeper_of(stepped, main)
    await _turns(stepped, main, 5)
    stepped.model.script(
        sleeper["id"],
        call("memory_rethink", label="human", new_memory="Likes turns."),
        call("memory_finish_edits"),
    )
    with stepped.model.holding():
        (run,) = json_list(await stepped.client.post("/v1/sleeptime/run", json={}))
        await stepped.step()  # submitted, and held open at the provider
    assert len(stepped.model.held()) == 1
    # The main agent is not held by its sleep-time agent's open step: a whole turn goes through,
    # and an edit of the shared block through the API lands too.
    await _turns(stepped, main, 1, said="still here")
    assert (await stepped.run(run["id"]))["status"] == "running"
    edited = await stepped.client.patch(
        f"/v1/agents/{main['id']}/core-memory/blocks/human", json={"value": "Lives in Lyon."}
    )
    assert edited.status_code == 200, edited.text

    stepped.model.release()
    assert (await stepped.finish(run["id"]))["status"] == "completed"
    # The later edit (the sleep-time agent's rewrite) wins, and what it replaced is on record.
    human = json_object(await stepped.client.get(f"/v1/agents/{main['id']}/core-memory/blocks/human"))
    assert human["value"] == "Likes turns."
    messages = json_list(await stepped.client.get(f"/v1/agents/{sleeper['id']}/messages"))
    returns = [m["tool_return"] for m in messages if m["message_type"] == "tool_return_message"]
    assert any("your rewrite replaced that edit" in r and "Lives in Lyon." in r for r in returns), returns
    # The main agent's next request shows the new memory in its system message.
    await _turns(stepped, main, 1)
    assert "Likes turns." in stepped.model.requests(main["id"])[-1].system


async def test_a_failing_sleeptime_agent_fails_alone_with_its_reason_on_its_run(stepped: SteppedRuns) -> None:
    mains = [await stepped.agent(f"pal-{i}", agent_type="letta_v1_agent", enable_sleeptime=True) for i in range(2)]
    sleepers = [await _sleeper_of(stepped, main) for main in mains]
    for main in mains:
        await _turns(stepped, main, 5)
    stepped.model.fail(sleepers[0]["id"], kind="invalid_request_error")
    stepped.model.script(sleepers[1]["id"], call("memory_finish_edits"))
    (run,) = json_list(await stepped.client.post("/v1/sleeptime/run", json={}))
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 1, "failed": 1, "cancelled": 0}, done
    (failure,) = done["progress"]["failures"]
    assert failure["agent_id"] == sleepers[0]["id"] and "invalid_request_error" in failure["error"], failure
    # Its main agent is as it was: it takes its next turn.
    await _turns(stepped, mains[0], 1)
