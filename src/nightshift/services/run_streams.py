"""Background runs' streams: written as the run goes, in batches, and read back live from any process.

The process stepping a background run writes its stream through a :class:`ChunkLog`: each chunk
is numbered (``seq_id`` from 1) and kept in memory until :data:`FLUSH_CHUNKS` have gathered, or
:data:`FLUSH_SECONDS` have passed, or a step has been written; then they go in one statement,
with the run's lease renewed in the same transaction (``store.run_chunks.append``). Its
stepping ends the stream itself (the stop reason and the usage, or the error, then ``DONE``)
before it ends the run.

A reader (:func:`follow`) reads the stored chunks after its cursor, in pages, then waits for more:
woken at once by this process's writers (:class:`Wakeups`), and polling the database every
``poll_interval`` for the writers of other processes. A run that ended without its stream's end
(cancelled, failed at a shutdown or after a crash) gets its end made from its record
(``domain.run_chunks.ended_stream``); an open run whose lease expired lost its process: the
reader fails it (``fail_lost``), then reads that end. A reader therefore always reaches an end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Iterator
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.clock import Clock
from nightshift.domain.agent_runs import AgentRun, AgentRunStatus
from nightshift.domain.run_chunks import ChunkKind, RunChunk, ended_stream
from nightshift.errors import InvalidInput
from nightshift.store import agent_runs as agent_run_store
from nightshift.store import agents as agent_store
from nightshift.store import run_chunks

log = logging.getLogger(__name__)

FLUSH_CHUNKS: Final = 64  # chunks gathered before they are written at once
FLUSH_SECONDS: Final = 0.2  # how long a chunk waits in memory at most
POLL_SECONDS: Final = 0.1  # Letta's poll_interval default
MIN_POLL_SECONDS: Final = 0.02
MAX_POLL_SECONDS: Final = 10.0
PAGE: Final = 100  # Letta's batch_size default
MAX_PAGE: Final = 1000


class Wakeups:
    """This process's readers of streams, woken when a writer of this process stores chunks."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def waiting(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever chunks of ``run_id`` are stored by this process, while in the block."""
        event = asyncio.Event()
        self._waiting.setdefault(run_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiting.get(run_id, set())
            events.discard(event)
            if not events:
                self._waiting.pop(run_id, None)

    def wake(self, run_id: str) -> None:
        """Chunks of ``run_id`` were stored."""
        for event in self._waiting.get(run_id, ()):
            event.set()


class ChunkLog:
    """The writer of one background run's stream (see the module): numbers, gathers and stores its chunks.

    Args:
        engine: The database.
        run_id: The run whose stream this is.
        clock: The time the lease is counted from.
        lease: How long the run's lease lasts after each write.
        wakeups: This process's readers, woken after each write.
    """

    def __init__(self, engine: AsyncEngine, run_id: str, *, clock: Clock, lease: timedelta, wakeups: Wakeups) -> None:
        self.run_id = run_id
        self._engine = engine
        self._clock = clock
        self._lease = lease
        self._wakeups = wakeups
        self._next = 1
        self._buffer: list[RunChunk] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self._due = asyncio.Event()  # enough chunks gathered: write them now
        self._open = True  # False once the run was ended by someone else: nothing more is stored
        self.written = asyncio.Event()  # set after the first chunks are stored

    def add(self, kind: ChunkKind, data: dict[str, Any] | None = None) -> RunChunk:
        """Number a chunk and keep it for the next write (due now when enough have gathered)."""
        seq_id = self._next
        self._next += 1
        chunk = RunChunk(
            seq_id=seq_id, kind=kind, data=None if data is None else {**data, "run_id": self.run_id, "seq_id": seq_id}
        )
        self._buffer.append(chunk)
        if len(self._buffer) >= FLUSH_CHUNKS:
            self._due.set()
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._flush_soon(), name=f"stream of {self.run_id}")
        return chunk

    async def flush(self) -> None:
        """Store the chunks gathered so far (one transaction, which renews the run's lease)."""
        async with self._lock:
            batch, self._buffer = self._buffer, []
            if not batch or not self._open:
                return
            until = self._clock.now() + self._lease
            try:
                async with self._engine.begin() as conn:
                    self._open = await run_chunks.append(conn, self.run_id, batch, lease_until=until)
            except BaseException:
                self._buffer[:0] = batch  # kept for the next write, in order
                raise
        if self._open:
            self.written.set()
        self._wakeups.wake(self.run_id)

    async def close(self, ending: list[tuple[ChunkKind, dict[str, Any] | None]]) -> None:
        """End the stream with ``ending`` (its last chunks, ``DONE`` among them) and store all."""
        for kind, data in ending:
            self.add(kind, data)
        await self.flush()

    def abandon(self) -> None:
        """Stop writing: this process will not finish the run (what is not stored is dropped)."""
        self._open = False
        if self._timer is not None:
            self._timer.cancel()

    async def _flush_soon(self) -> None:
        # (``asyncio.timeout``, not ``wait_for``, which in Python 3.11 can lose a cancellation.)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_SECONDS):
                await self._due.wait()
        self._due.clear()
        try:
            await self.flush()
        except Exception:
            log.exception("the stream of run %s could not be stored now; it is tried again", self.run_id)
        if self._buffer and self._open:
            self._timer = asyncio.create_task(self._flush_soon(), name=f"stream of {self.run_id}")


def check_reading(*, starting_after: int, poll_interval: float | None, batch_size: int | None) -> tuple[float, int]:
    """The poll interval and page size a reader asked for, checked.

    Raises:
        InvalidInput: a negative cursor, or a poll interval or page size out of bounds.
    """
    if starting_after < 0:
        raise InvalidInput("starting_after is a seq_id: 0 or more", field="starting_after")
    poll = POLL_SECONDS if poll_interval is None else poll_interval
    if not MIN_POLL_SECONDS <= poll <= MAX_POLL_SECONDS:
        raise InvalidInput(
            f"poll_interval must be between {MIN_POLL_SECONDS} and {MAX_POLL_SECONDS} seconds", field="poll_interval"
        )
    page = PAGE if batch_size is None else batch_size
    if not 1 <= page <= MAX_PAGE:
        raise InvalidInput(f"batch_size must be between 1 and {MAX_PAGE}", field="batch_size")
    return poll, page


async def follow(
    engine: AsyncEngine,
    wakeups: Wakeups,
    clock: Clock,
    org_id: str,
    run_id: str,
    *,
    after: int,
    poll_interval: float = POLL_SECONDS,
    page: int = PAGE,
) -> AsyncGenerator[RunChunk, None]:
    """The chunks of the run's stream after ``after``, stored or to come, until its end (see the module).

    The run's record is read before its chunks each time: a run seen ended has all its chunks
    stored already (``store.run_chunks.append`` writes only while it is open).
    """
    cursor = after
    with wakeups.waiting(run_id) as woken:
        while True:
            woken.clear()
            async with engine.connect() as conn:
                run = await agent_run_store.get_run(conn, org_id, run_id)
                if run is None:
                    return  # deleted meanwhile
                chunks = await run_chunks.read(conn, run_id, after=cursor, limit=page)
                last = await run_chunks.last_chunk(conn, run_id) if run.status.ended and len(chunks) < page else None
            for chunk in chunks:
                yield chunk
                cursor = chunk.seq_id
                if chunk.kind is ChunkKind.DONE:
                    return
            if len(chunks) == page:
                continue
            if run.status.ended:
                if last is not None and last[1] is ChunkKind.DONE:
                    return  # the stream's end is stored, and the reader is past it
                for chunk in ended_stream(run, last_seq_id=last[0] if last is not None else 0):
                    if chunk.seq_id > cursor:
                        yield chunk
                return
            if run.lease_until is not None and run.lease_until < clock.now():
                await fail_lost(engine, run_id, clock)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll_interval):
                    await woken.wait()


async def fail_lost(engine: AsyncEngine, run_id: str, clock: Clock) -> None:
    """Fail the background run ``run_id`` if its lease expired: its process is gone."""
    async with engine.begin() as conn:
        await fail_lost_in(conn, clock.now(), run_id=run_id)


async def fail_lost_in(conn: AsyncConnection, now: datetime, *, run_id: str | None = None) -> list[AgentRun]:
    """Fail the open background runs whose lease expired before ``now`` (``run_id``'s, or all):
    their process is gone. The agents of those that were running are let go (their hold was that
    process's). Returns the runs failed."""
    failed = await agent_run_store.fail_expired(conn, now, run_id=run_id)
    for run in failed:
        if run.status is AgentRunStatus.RUNNING:
            await agent_store.release_sync_step(conn, run.agent_id, run.id)
        log.warning("background run %s failed: %s", run.id, agent_run_store.LOST)
    return failed
