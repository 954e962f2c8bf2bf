"""New runs, queued by the API and started by a poller; and how a poller learns that one is queued.

``POST /v1/messages/batches`` writes the run (status created) with its requests and answers at
once (``steps.queue_batch_run``). A poller then starts it (``Worker.start_queued_runs`` calls
``start_one``): in one transaction it claims the run, deletes its requests and writes its first
step from them (``steps.write_first_step``); then it submits the step's provider batches. The
deletion is the compare-and-set: a run's first step is written by the transaction that deleted
its requests, so two pollers never both write it, and a poller that dies before it commits leaves
the run queued for the next one. The run stays ``created`` until its first provider batch is
submitted, as before.

A poller learns of a queued run (``watch_queue``) from PostgreSQL's ``NOTIFY``, sent in the run's
transaction, on a connection of its own that it opens again when it drops; on SQLite by asking
whether anything was committed when the database's files are written (Linux tells at once) and
every ``Settings.run_queue_seconds`` in any case, and looking for queued runs when it was. An
API on the poller's own event loop sets the poller's event as well (``AppState.runs_queued``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import asyncpg
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch.leases import Leases
from nightshift.batch.stages import StageParts
from nightshift.batch.steps import WrittenBatch, write_first_step
from nightshift.clock import SYSTEM_CLOCK, Clock
from nightshift.domain.batches import BatchRunRequest, BatchRunStatus, ProviderBatch
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import provider_batches as batch_store
from nightshift.store.sqlite_writes import database_writes

log = logging.getLogger(__name__)

# A queued run's error when writing its first step failed: the exception stays in the server's
# log, which the caller may not see, and its text may hold what only the operator should read.
FIRST_STEP_NOT_WRITTEN = "the server could not write the run's first step (its log says why)"

# After its listening connection drops, how long a poller waits before it connects again.
RECONNECT_DELAY = 1.0
# On SQLite, the shortest time between two looks at the queue when writes keep coming (a look
# costs a few statements; a run of 10,000 agents being written is many writes).
LOOK_GAP = 0.05
# The pause after a look that found no new commit although a write was reported: a commit writes
# its log before SQLite shows it, so the look came early, and the commit is shown a moment later.
COMMIT_GAP = 0.002


@dataclass(frozen=True, slots=True)
class Claimed:
    """A queued run a poller claimed: ``started`` unless another poller took its requests first;
    the provider batches of the first step it wrote (none when the run failed), as written when
    the step is small enough to hold (see ``write_first_step``)."""

    started: bool
    batches: list[ProviderBatch | WrittenBatch] = field(default_factory=list)


async def start_one(parts: StageParts, leases: Leases) -> Claimed | None:
    """The start stage: claim a queued run and write its first step, its batches leased to
    ``leases``; None when no run is queued.

    A run whose first step cannot be written for a reason of its own (not the database's) ends
    failed, with no batches, so that it does not hold the queue.
    """
    now = parts.clock.now()
    async with parts.engine.begin() as conn:
        run = await batch_run_store.claim_queued_run(conn)
        if run is None:
            return None
        # Taken after the claim, in a write of its own: none if another poller just took them.
        requests = [BatchRunRequest.from_json(r) for r in await batch_run_store.take_queued_requests(conn, run.id)]
        if not requests:
            return Claimed(started=False)
        try:
            batches = await write_first_step(
                conn,
                run,
                requests,
                now,
                lease=leases.lease(),
                endpoints=parts.providers.endpoints(),
                summary_model=parts.summary_model,
                batch_bytes=parts.batch_bytes,
                kept=parts.agents,
            )
            return Claimed(started=True, batches=batches)
        except DBAPIError:
            raise  # the database's: tried again at the next pass
        except Exception:
            log.exception("the first step of run %s could not be written; the run fails", run.id)
            failed = run.id
    await _fail(parts, failed)
    return Claimed(started=True)


async def _fail(parts: StageParts, run_id: str) -> None:
    async with parts.engine.begin() as conn:
        now = parts.clock.now()
        await batch_run_store.set_run_status(
            conn, run_id, BatchRunStatus.FAILED, now, only_from=(BatchRunStatus.CREATED,), error=FIRST_STEP_NOT_WRITTEN
        )
        await batch_run_store.forget_queued_requests(conn, run_id)


async def watch_queue(engine: AsyncEngine, wake: asyncio.Event, *, every: float, clock: Clock = SYSTEM_CLOCK) -> None:
    """Set ``wake`` whenever a run is queued or a provider batch is made due at once (a provider's
    webhook), until cancelled: on PostgreSQL when their ``NOTIFY`` comes, elsewhere when a look
    after a commit (asked when the database's files are written, and every ``every`` seconds)
    finds a queued run or a due batch that no process holds."""
    if engine.dialect.name == "postgresql":
        await _listen(engine, wake)
        return
    while True:
        try:
            await _watch_sqlite(engine, wake, every=every, clock=clock)
        except Exception:
            log.warning("looking for queued runs failed; trying again", exc_info=True)
        await asyncio.sleep(every)


async def _watch_sqlite(engine: AsyncEngine, wake: asyncio.Event, *, every: float, clock: Clock) -> None:
    """Ask SQLite whether another connection committed since the last look (``PRAGMA
    data_version``, a counter it keeps in memory: a fraction of what reading the tables costs),
    and look for queued runs and due batches only then. It asks when the database's files are
    written (``store.sqlite_writes``: at once, where Linux tells), at most every ``LOOK_GAP``
    seconds under a stream of commits (see ``LookPacing``), and every ``every`` seconds whatever
    happens. The connection is held, with no transaction left open between looks (an open one
    would pin SQLite's snapshot)."""
    seen: int | None = None
    pacing = LookPacing()
    async with engine.connect() as conn:
        with database_writes(engine.url) as writes:
            while True:
                if writes is not None:
                    writes.forget()  # before the look: a commit during it is reported again
                version = await conn.scalar(text("PRAGMA data_version"))
                committed = version != seen
                if committed:
                    # Read after the counter: a commit between the two is seen by this look or moves it again.
                    if await batch_run_store.any_queued(conn) or await batch_store.any_due(conn, clock.now()):
                        wake.set()
                    seen = version
                await conn.rollback()
                if writes is None:
                    await asyncio.sleep(every)
                else:
                    await asyncio.sleep(pacing.pause(committed=committed))
                    waited = time.monotonic()
                    await writes.next(every)
                    if time.monotonic() - waited > LOOK_GAP:
                        pacing.lull()


class LookPacing:
    """How long the SQLite watch pauses after a look, before it waits for the next write.

    After a look that found a commit: ``LOOK_GAP``, so that a stream of commits is looked at
    ``LOOK_GAP`` apart. After one that found none although a write was reported: ``COMMIT_GAP``
    (the commit being written is shown a moment later), doubled at each such look in a row up to
    ``LOOK_GAP`` (a long transaction writes its log all along), and ``COMMIT_GAP`` again after a
    commit or a lull (a checkpoint's write of the database file finds no commit either).
    """

    def __init__(self) -> None:
        self.quiet = COMMIT_GAP

    def pause(self, *, committed: bool) -> float:
        if committed:
            self.quiet = COMMIT_GAP
            return LOOK_GAP
        pause, self.quiet = self.quiet, min(2 * self.quiet, LOOK_GAP)
        return pause

    def lull(self) -> None:
        """No write came for a while: the next one is a new commit's."""
        self.quiet = COMMIT_GAP


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
            await connection.add_listener(batch_run_store.RUNS_CHANNEL, lambda *_: wake.set())
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
