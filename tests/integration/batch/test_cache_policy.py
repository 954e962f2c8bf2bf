"""The cache policy in batch runs: where the requests' cache breakpoints go, with which lifetime, and
what the caching saved or lost per request (``domain/caching.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from integration.batch.kit import call, say
from support.scripted import NORMAL_CALLS
from support.stepped import SteppedRuns

HAIKU = "anthropic/claude-haiku-4-5-20251001"
HOUR = "1h"


def marks(body: dict[str, Any]) -> tuple[str | None, ...]:
    """The lifetimes a wire body's cache marks ask for: after the last tool, the system prompt,
    the last message (None: no mark)."""
    blocks = (body["tools"][-1], body["system"][-1], body["messages"][-1]["content"][-1])
    return tuple(b["cache_control"]["ttl"] if "cache_control" in b else None for b in blocks)


async def three_turns(stepped: SteppedRuns, agent_id: str, text: str) -> dict[str, Any]:
    """A run in which the agent searches twice, then answers."""
    stepped.model.script(
        agent_id,
        call("conversation_search", heartbeat=True, query="tea"),
        call("conversation_search", heartbeat=True, query="coffee"),
        say(text),
    )
    run = await stepped.start([{"agent_id": agent_id, "input": text}])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    return done


async def test_auto_writes_for_an_hour_once_the_agent_is_known_to_go_on(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("planner", model=HAIKU)
    first = await three_turns(stepped, agent["id"], "what do I drink?")

    # A new agent's first request is expected to be its last (nothing to go by): no write. Its
    # second, one more at most: an hour's write (2x) does not pay for one read (0.1x) against two
    # plain inputs. Its third, after two: an hour everywhere (its turns are a batch apart).
    first_run = [marks(body) for body in stepped.model.calls(agent["id"])]
    assert first_run == [(None, None, None), (None, None, None), (HOUR, HOUR, HOUR)]

    # Next time, its window shows that it takes three turns for an input: an hour from the start.
    second = await three_turns(stepped, agent["id"], "and in the morning?")
    assert marks(stepped.model.calls(agent["id"])[3]) == (HOUR, HOUR, HOUR)

    # What each request's caching saved or lost is its own: nothing, nothing, then the write (a
    # loss); the next run's first request reads it back (a saving). A run's figure is their sum.
    for run, expected in ((first, [0, 0, -1]), (second, [1, 1, 1])):
        response = await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents")
        (row,) = response.json()["agents"]
        savings = [request["cache_savings_usd"] for request in row["requests"]]
        assert [(s > 0) - (s < 0) for s in savings] == expected, savings
        # Each figure is rounded to a millionth of a dollar.
        assert sum(savings) == pytest.approx(run["progress"]["cache_savings_usd"], abs=1e-6 * len(savings))


async def test_agents_sharing_their_tools_share_one_write(stepped: SteppedRuns) -> None:
    # Three agents with the same tools, one step each, a batch's half hour apart: an hour's write
    # read twice (2 + 0.2 for three) is cheaper than three plain inputs; their systems (their
    # memory) and their histories are their own, read by nobody.
    agents = [await stepped.agent(f"twin-{i}", model=HAIKU) for i in range(3)]
    for agent in agents:
        stepped.model.script(agent["id"], say("hello"))
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    assert (await stepped.finish(run["id"]))["status"] == "completed"

    bodies = [stepped.model.calls(a["id"])[0] for a in agents]
    assert [marks(body) for body in bodies] == [(HOUR, None, None)] * 3
    usages = [
        r["usage"] for r in (await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents")).json()["agents"]
    ]
    assert sorted(u["cache_write_1h_tokens"] > 0 for u in usages) == [False, False, True]
    assert sum(u["cache_read_tokens"] > 0 for u in usages) == 2


@pytest.mark.settings(cache_policy="off")
async def test_off_marks_nothing(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("planner", model=HAIKU)
    await three_turns(stepped, agent["id"], "what do I drink?")
    await three_turns(stepped, agent["id"], "and in the morning?")

    assert {marks(body) for body in stepped.model.calls(agent["id"])} == {(None, None, None)}


@pytest.mark.settings(cache_policy="5m")
async def test_a_fixed_lifetime_marks_every_breakpoint(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("planner", model=HAIKU)
    await three_turns(stepped, agent["id"], "what do I drink?")

    assert {marks(body) for body in stepped.model.calls(agent["id"])} == {("5m", "5m", "5m")}


async def test_calls_write_for_five_minutes_once_the_agent_goes_on(stepped: SteppedRuns) -> None:
    # Through the normal API the next call follows within seconds: a five-minute write pays from
    # the first read back, and is kept to the end of the task.
    agent = await stepped.agent("chatty", model=HAIKU)
    stepped.model.script(
        NORMAL_CALLS,
        call("conversation_search", heartbeat=True, query="tea"),
        call("conversation_search", heartbeat=True, query="coffee"),
        say("done"),
    )
    response = await stepped.client.post(
        f"/v1/agents/{agent['id']}/messages", json={"messages": [{"role": "user", "content": "what do I drink?"}]}
    )
    assert response.status_code == 200, response.text

    bodies = stepped.model.calls()
    assert [marks(body) for body in bodies] == [(None, None, None), ("5m", "5m", "5m"), ("5m", "5m", "5m")]


@pytest.mark.settings(cache_policy="off")
async def test_off_marks_no_call_either(stepped: SteppedRuns) -> None:
    agent = await stepped.agent("chatty", model=HAIKU)
    stepped.model.script(NORMAL_CALLS, call("conversation_search", heartbeat=True, query="tea"), say("done"))
    response = await stepped.client.post(
        f"/v1/agents/{agent['id']}/messages", json={"messages": [{"role": "user", "content": "what do I drink?"}]}
    )
    assert response.status_code == 200, response.text
    assert {marks(body) for body in stepped.model.calls()} == {(None, None, None)}
