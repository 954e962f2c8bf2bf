"""The socket ``serve`` hands new runs to its poller process through (``batch.poller_process``),
over a real socket pair, and the JSON form of a run's requests that travels on it."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import orjson
import pytest

from nightshift.batch.poller_process import ChannelClosed, RunChannel, answer_runs
from nightshift.batch.steps import RunRequest
from nightshift.domain.messages import Image, UserInput


async def test_answers_come_back_to_their_questions_in_any_order() -> None:
    ours, childs = socket.socketpair()
    releases = {name: asyncio.Event() for name in ("slow", "fast")}

    async def handle(message: dict[str, Any]) -> dict[str, Any]:
        await releases[message["name"]].wait()
        return {"run_id": f"run-of-{message['name']}"}

    child = asyncio.create_task(answer_runs(childs.detach(), handle))
    channel = await RunChannel.open(ours)
    slow = asyncio.create_task(channel.ask({"name": "slow"}))
    fast = asyncio.create_task(channel.ask({"name": "fast"}))
    releases["fast"].set()
    assert await fast == {"run_id": "run-of-fast"}
    assert not slow.done()
    releases["slow"].set()
    assert await slow == {"run_id": "run-of-slow"}
    await channel.close()
    await asyncio.wait_for(child, 5)  # the child's end returns when ours closes


async def test_a_handler_that_fails_still_answers() -> None:
    ours, childs = socket.socketpair()

    async def handle(message: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("the database said no")

    child = asyncio.create_task(answer_runs(childs.detach(), handle))
    channel = await RunChannel.open(ours)
    assert await asyncio.wait_for(channel.ask({"name": "doomed"}), 5) == {"failed": "ValueError"}
    await channel.close()
    await asyncio.wait_for(child, 5)


async def test_a_child_that_ends_before_it_answers_fails_the_question() -> None:
    ours, childs = socket.socketpair()
    channel = await RunChannel.open(ours)
    asking = asyncio.create_task(channel.ask({"name": "lost"}))
    await asyncio.sleep(0.05)
    childs.close()  # the child died with the question unanswered
    with pytest.raises(ChannelClosed):
        await asyncio.wait_for(asking, 5)
    with pytest.raises(ChannelClosed):
        await channel.ask({"name": "after"})
    await channel.close()


def test_run_requests_travel_as_json() -> None:
    requests = [
        RunRequest(agent_id="agent-a", messages=(UserInput(text="hello"), UserInput(text="again")), max_steps=3),
        RunRequest(
            agent_id="agent-b",
            messages=(
                UserInput(
                    text="what is this?",
                    images=(Image(media_type="image/png", data="iVBORw0KGgo="), Image(url="https://example.com/a.jpg")),
                ),
            ),
        ),
    ]
    assert [RunRequest.from_json(orjson.loads(orjson.dumps(r.to_json()))) for r in requests] == requests
    assert requests[0].to_json()["messages"] == ["hello", "again"]  # a text alone travels as a string
