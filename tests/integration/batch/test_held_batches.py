"""A step whose provider batch has not ended: a pass leaves the run as it was; the batch ending or
expiring at the provider is applied by the next pass."""

from __future__ import annotations

from integration.batch.kit import say
from support.stepped import SteppedRuns


async def test_a_pass_over_an_open_batch_changes_nothing_until_it_ends(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("patient")
    stepped.model.script(agent["id"], say("at last"))
    with stepped.model.holding():
        run = await stepped.start([{"agent_id": agent["id"], "input": "hello"}])
    (held,) = stepped.model.held()

    assert await stepped.step() == 1  # polled: still in progress at the provider
    opened = await stepped.run(run["id"])
    assert opened["status"] == "running" and opened["progress"]["agents"]["running"] == 1
    assert [m["role"] for m in await stepped.messages(run["id"])] == ["user"]

    stepped.model.release(held)
    done = await stepped.finish(run["id"], max_passes=2)
    assert done["status"] == "completed", done
    assert [m["role"] for m in await stepped.messages(run["id"])] == ["user", "assistant", "tool"]


async def test_an_expired_batch_fails_its_agents_and_ends_the_run(stepped: SteppedRuns) -> None:
    agents = [await stepped.agent(f"late{i}") for i in range(2)]
    with stepped.model.holding():
        run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    await stepped.step()
    assert (await stepped.run(run["id"]))["status"] == "running"

    stepped.model.expire()
    done = await stepped.finish(run["id"], max_passes=2)
    assert done["status"] == "failed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 0, "failed": 2, "cancelled": 0}
    assert all("expired" in f["error"] for f in done["progress"]["failures"]), done["progress"]["failures"]
