"""New runs, queued by the API and started by a poller; and how a poller learns that one is queued.

``POST /v1/messages/batches`` writes the run (status created) with its requests and answers at once
(``steps.queue_run``). A poller then starts it (``start_queued_runs``): in one transaction it claims
the run, deletes its requests and writes its first step from them (``steps.write_first_step``);
then it submits the step's provider batches. The deletion is the compare-and-set: a run's first
step is written by the transaction that deleted its requests, so two pollers never both write
it, and a poller that dies before it commits leaves the run queued for the next one. The run stays
``created`` until its first provider batch is submitted, as before.

A poller learns of a queued run (``watch_queue``) from PostgreSQL's ``NOTIFY``, sent in the run's
transaction, on a connection of its own that it opens again when it drops; on SQLite by looking
for queued runs every ``Settings.run_queue_seconds``. An API on the poller's own event loop sets
the poller's event as well (``AppState.runs_queued``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch.steps import RunRequest, write_first_step
from nightshift.batch.worker import Worker
from nightshift.domain.batches import ProviderBatch, RunStatus
from nightshift.store import runs as run_store

log = logging.getLogger(__name__)

# After its listening connection drops, how long a poller waits before it connects again.
RECONNECT_DELAY = 1.0


async def start_queued_runs(worker: Worker) -> int:
    """Write the first step of every queued run, one run per transaction, and submit it (failed
    submissions are retried by the poller, as any). Returns how many runs were started.

    A run whose first step cannot be written for a reason of its own (not the database's) ends
    failed, so that it does not hold the queue.
    """
    started = 0
    while not worker.draining.is_set():
        try:
            batches = await _start_one(worker)
        except _Failed as failed:
            await _fail(worker.engine, failed.run_id)
            continue
        if batches is None:
            break
        if batches is _TAKEN:
            continue
        await worker.submit_new(batches)
        started += 1
    return started


# What ``_start_one`` returns for a run another poller started first.
_TAKEN: list[ProviderBatch] = []


class _Failed(Exception):
    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


async def _start_one(worker: Worker) -> list[ProviderBatch] | None:
    """Claim a queued run and write its first step; its provider batches (``_TAKEN`` when another
    poller wrote it first), or None when no run is queued."""
    now = datetime.now(UTC)
    async with worker.engine.begin() as conn:
        run = await run_store.claim_queued_run(conn)
        if run is None:
            return None
        # Taken after the claim, in a write of its own: none if another poller just took them.
        requests = [RunRequest.from_json(r) for r in await run_store.take_queued_requests(conn, run.id)]
        if not requests:
            return _TAKEN
        try:
            batches = await write_first_step(
                conn,
                run,
                requests,
                now,
                lease=worker.lease(now),
                endpoints=worker.providers.endpoints(),
                summary_model=worker.summary_model,
                batch_bytes=worker.batch_bytes,
            )
        except DBAPIError:
            raise  # the database's: tried again at the next pass
        except Exception as exc:
            log.exception("the first step of run %s could not be written; the run fails", run.id)
            raise _Failed(run.id) from exc
    return batches


async def _fail(engine: AsyncEngine, run_id: str) -> None:
    async with engine.begin() as conn:
        now = datetime.now(UTC)
        await run_store.set_run_status(conn, run_id, RunStatus.FAILED, now, only_from=(RunStatus.CREATED,))
        await run_store.forget_queued_requests(conn, run_id)


async def watch_queue(engine: AsyncEngine, wake: asyncio.Event, *, every: float) -> None:
    """Set ``wake`` whenever a run is queued, until cancelled: on PostgreSQL when its ``NOTIFY``
    comes, elsewhere when a look every ``every`` seconds finds one."""
    if engine.dialect.name == "postgresql":
        await _listen(engine, wake)
        return
    while True:
        try:
            async with engine.connect() as conn:
                if await run_store.any_queued(conn):
                    wake.set()
        except Exception:
            log.warning("looking for queued runs failed; trying again", exc_info=True)
        await asyncio.sleep(every)


async def _listen(engine: AsyncEngine, wake: asyncio.Event) -> None:
    """``LISTEN`` on a connection of its own, opened again whenever it drops; each time it is
    (re)opened ``wake`` is set too, for a run queued while nobody listened."""
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    while True:
        closed = asyncio.Event()
        connection: asyncpg.Connection | None = None
        try:
            connection = await asyncpg.connect(url)
            connection.add_termination_listener(lambda _, closed=closed: closed.set())
            await connection.add_listener(run_store.RUNS_CHANNEL, lambda *_: wake.set())
            wake.set()
            await closed.wait()
            log.warning("the connection listening for new runs closed; opening another")
        except (OSError, asyncpg.PostgresError):
            log.warning("listening for new runs failed; trying again", exc_info=True)
        finally:
            if connection is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(connection.close(timeout=1))
        await asyncio.sleep(RECONNECT_DELAY)
