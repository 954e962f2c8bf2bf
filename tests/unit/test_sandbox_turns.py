"""Who runs next in the tool sandbox (:class:`~nightshift.tools.turns.Turns`), without processes.

Each test holds turns the way the sandbox does (take, then give back when the call is done) and
looks at who got the turns that freed.
"""

from __future__ import annotations

import asyncio

import pytest

from nightshift.tools.turns import Closed, Turns


class Pool:
    """Callers of a :class:`Turns`, each one task that takes a turn and keeps it until told."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self.served: list[str] = []  # who got a turn, in order
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def call(self, org_id: str, name: str) -> asyncio.Task[None]:
        """A caller of ``org_id`` that waits for a turn; it runs (holds it) until :meth:`done`."""

        async def caller() -> None:
            await self.turns.take(org_id)
            self.served.append(name)

        task = asyncio.create_task(caller(), name=name)
        self._tasks[name] = task
        return task

    async def settle(self) -> None:
        """Let every caller that can go on get to its next wait (no time passes)."""
        for _ in range(3):
            await asyncio.sleep(0)

    async def done(self, org_id: str) -> None:
        """One call of ``org_id`` ends and gives its turn back."""
        self.turns.give_back(org_id)
        await self.settle()


async def test_a_lone_organization_gets_every_worker() -> None:
    pool = Pool(Turns(3, queue_limit=10))
    for i in range(5):
        pool.call("a", f"a{i}")
    await pool.settle()

    assert pool.served == ["a0", "a1", "a2"]
    await pool.done("a")
    assert pool.served == ["a0", "a1", "a2", "a3"]


async def test_a_freed_turn_goes_to_the_organization_with_fewest_calls_running() -> None:
    pool = Pool(Turns(2, queue_limit=10))
    for i in range(6):
        pool.call("a", f"a{i}")
    await pool.settle()
    pool.call("b", "b0")
    pool.call("b", "b1")
    pool.call("c", "c0")
    await pool.settle()
    assert pool.served == ["a0", "a1"]

    await pool.done("a")  # a runs one, b and c none: b's call waited longer than c's
    await pool.done("a")  # a and c run none: c was never served, a was
    await pool.done("b")  # a and b run none: a was served longer ago
    await pool.done("a")  # a and b run none: b was served longer ago
    await pool.done("c")  # a runs none, b one

    assert pool.served == ["a0", "a1", "b0", "c0", "a2", "b1", "a3"]


async def test_two_busy_organizations_share_the_workers_evenly() -> None:
    pool = Pool(Turns(4, queue_limit=50))
    for i in range(20):
        pool.call("a", f"a{i}")
    await pool.settle()
    for i in range(20):
        pool.call("b", f"b{i}")
    await pool.settle()

    # a holds all four; as its calls end, b's take their turns until each runs two.
    await pool.done("a")
    await pool.done("a")
    assert (pool.turns.running("a"), pool.turns.running("b")) == (2, 2)
    for _ in range(10):
        await pool.done("a")
        await pool.done("b")
        assert (pool.turns.running("a"), pool.turns.running("b")) == (2, 2)


async def test_the_queue_of_each_organization_is_bounded_on_its_own() -> None:
    turns = Turns(1, queue_limit=2)

    assert turns.join("a")
    assert turns.join("a")
    assert not turns.join("a")  # a third caller of a is refused
    assert turns.join("b")  # another organization is not
    turns.leave("a")
    assert turns.join("a")  # a place came free


async def test_a_caller_cancelled_while_it_waits_takes_no_turn() -> None:
    pool = Pool(Turns(1, queue_limit=10))
    pool.call("a", "a0")
    gone = pool.call("b", "b0")
    pool.call("c", "c0")
    await pool.settle()

    gone.cancel()
    await pool.settle()
    await pool.done("a")

    assert pool.served == ["a0", "c0"]


async def test_a_turn_handed_to_a_caller_cancelled_meanwhile_goes_to_the_next() -> None:
    pool = Pool(Turns(1, queue_limit=10))
    pool.call("a", "a0")
    late = pool.call("b", "b0")
    pool.call("c", "c0")
    await pool.settle()

    pool.turns.give_back("a")  # b0 is handed the turn ...
    late.cancel()  # ... and cancelled before it could run
    await pool.settle()

    assert pool.served == ["a0", "c0"]
    assert pool.turns.running("b") == 0


async def test_closing_wakes_every_waiting_caller_and_refuses_new_ones() -> None:
    turns = Turns(1, queue_limit=10)
    await turns.take("a")
    waiting = [asyncio.create_task(turns.take(org)) for org in ("a", "b")]
    await asyncio.sleep(0)

    turns.close()

    for task in waiting:
        with pytest.raises(Closed):
            await task
    with pytest.raises(Closed):
        await turns.take("c")
