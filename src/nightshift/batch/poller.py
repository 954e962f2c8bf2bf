"""The poller loop that runs inside ``nightshift serve`` (and once for ``nightshift poll --once``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from nightshift.batch.callbacks import CallbackRules, claim_due_callbacks, send_callback, send_due_callbacks
from nightshift.batch.run_queue import watch_queue
from nightshift.batch.worker import Worker
from nightshift.domain.batches import BatchRun

log = logging.getLogger(__name__)

# Rounds of claiming in one pass: work that becomes due within the pass is done in the same pass.
MAX_ROUNDS = 100


async def poll_once(worker: Worker, callbacks: CallbackRules) -> int:
    """One pass, then the due callbacks (``nightshift poll --once``; a poller that goes on sends
    them beside its passes, see ``poll_forever``). Returns the work done."""
    handled = await _advance(worker)
    if worker.draining.is_set():
        return handled  # due callbacks wait for a process that stays (a callback may be slow)
    return handled + await send_due_callbacks(worker.engine, callbacks, clock=worker.parts.clock)


async def _advance(worker: Worker) -> int:
    """One pass: queue the sleep-time agents when due, start the queued runs, advance every due
    provider batch. Returns the work done."""
    handled = await worker.gather_sleeptime()
    handled += await worker.start_queued_runs()
    for _ in range(MAX_ROUNDS):
        claimed = await worker.run_once()
        handled += claimed
        if claimed == 0:
            break
    return handled


async def _call_back(worker: Worker, rules: CallbackRules, passed: asyncio.Event) -> None:
    """After each pass (``passed``), until the worker drains, claim the due callbacks and send
    each on a task of its own: an endpoint slow to answer (an attempt may wait
    ``callbacks.TIMEOUT_SECONDS`` for each of its addresses) holds back neither the runs' steps
    nor another callback. Once drained, it waits for the attempts under way (``drain`` cuts them
    at its grace)."""
    sending: set[asyncio.Task[None]] = set()
    try:
        while True:
            await passed.wait()
            passed.clear()
            if worker.draining.is_set():
                break  # due callbacks wait for a process that stays
            try:
                claimed = await claim_due_callbacks(worker.engine, clock=worker.parts.clock)
            except Exception:
                log.exception("claiming due callbacks failed; trying again after the next pass")
                continue
            for run in claimed:
                task = asyncio.create_task(_attempt(worker, rules, run), name=f"callback-{run.id}")
                sending.add(task)
                task.add_done_callback(sending.discard)
        if sending:
            await asyncio.wait(sending)
    finally:
        for task in sending:
            task.cancel()


async def _attempt(worker: Worker, rules: CallbackRules, run: BatchRun) -> None:
    try:
        await send_callback(worker.engine, rules, run, clock=worker.parts.clock)
    except Exception:
        log.exception("the callback of run %s failed to be recorded; it is sent again later", run.id)


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
    when ``wake`` is set (by an API on this event loop). The callbacks that are due are sent
    beside the passes (``_call_back``)."""
    wake = wake or asyncio.Event()
    watching = asyncio.create_task(
        watch_queue(worker.engine, wake, every=queue_seconds, clock=worker.parts.clock), name="run-queue"
    )
    passed = asyncio.Event()
    calling_back = asyncio.create_task(_call_back(worker, callbacks, passed), name="callbacks")
    try:
        while not worker.draining.is_set():
            wake.clear()  # what is queued from here on is seen by this pass, or wakes the next
            wait = worker.poll_interval
            try:
                await _advance(worker)
                passed.set()
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
        passed.set()
        try:
            if worker.draining.is_set():  # the callbacks being sent finish (``drain`` cuts them at its grace)
                await asyncio.wait({calling_back})
        finally:
            calling_back.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await calling_back


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
