"""The poller loop that runs inside ``nightshift serve`` (and once for ``nightshift poll --once``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from nightshift.batch.callbacks import CallbackRules, send_due_callbacks
from nightshift.batch.run_queue import watch_queue
from nightshift.batch.worker import Worker

log = logging.getLogger(__name__)

# Rounds of claiming in one pass: work that becomes due within the pass is done in the same pass.
MAX_ROUNDS = 100


async def poll_once(worker: Worker, callbacks: CallbackRules) -> int:
    """One pass: queue the sleep-time agents when due, start the queued runs, advance every due
    provider batch, then send due callbacks. Returns the work done."""
    handled = await worker.gather_sleeptime()
    handled += await worker.start_queued_runs()
    for _ in range(MAX_ROUNDS):
        claimed = await worker.run_once()
        handled += claimed
        if claimed == 0:
            break
    if worker.draining.is_set():
        return handled  # due callbacks wait for a process that stays (a callback may be slow)
    return handled + await send_due_callbacks(worker.engine, callbacks, clock=worker.parts.clock)


async def poll_forever(
    worker: Worker,
    callbacks: CallbackRules,
    *,
    after_pass: Callable[[], None] | None = None,
    wake: asyncio.Event | None = None,
    queue_seconds: float = 1.0,
) -> None:
    """Pass when the first provider batch is due (every ``worker.poll_interval`` seconds at the
    most; see ``Worker.next_pass_in``) until cancelled or ``worker.draining`` is set;
    errors are logged, never fatal. ``after_pass`` is called after each pass (failed or not).
    The next pass starts at once when a run is queued (see ``run_queue.watch_queue``: SQLite is
    looked at after each write to its files where Linux tells, and every ``queue_seconds``), or
    when ``wake`` is set (by an API on this event loop)."""
    wake = wake or asyncio.Event()
    watching = asyncio.create_task(
        watch_queue(worker.engine, wake, every=queue_seconds, clock=worker.parts.clock), name="run-queue"
    )
    try:
        while not worker.draining.is_set():
            wake.clear()  # what is queued from here on is seen by this pass, or wakes the next
            wait = worker.poll_interval
            try:
                await poll_once(worker, callbacks)
                wait = await worker.next_pass_in()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("poller pass failed; trying again")
            if after_pass is not None:
                after_pass()
            waits = [asyncio.ensure_future(worker.draining.wait()), asyncio.ensure_future(wake.wait())]
            try:
                await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching


async def drain(worker: Worker, poller: asyncio.Task[None] | None, *, grace: float) -> int:
    """Shut the worker down: claim nothing more, let the poller finish the stage it is running
    (cancelled after ``grace`` seconds), then give back every lease of this process.

    Returns how many leases were given back.
    """
    worker.draining.set()
    if poller is not None:
        done, _ = await asyncio.wait({poller}, timeout=grace)
        if not done:
            # Cut at an await: every stage is a compare-and-set transition, safe to redo elsewhere.
            log.warning("the batch stage in progress outlasted %s s; stopping it", grace)
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
    released = await worker.leases.give_back_all()
    log.info("shut down: gave back %d provider batch lease(s)", released)
    return released
