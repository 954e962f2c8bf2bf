"""A background run's stream: stored as the run goes, read back by any client, from any server process.

A streamed send with ``background: true`` and a send to ``.../messages/async`` step their run in
the background (``services.agent_runs``); the run's chunks (``api.letta_stream``'s, numbered by
``seq_id``) are stored as they come (``services.run_streams.ChunkLog``). The streamed send answers
with that stream read from the database, live; ``POST`` (or ``GET``) ``/v1/runs/{id}/stream``
reads it again after any ``seq_id`` (``starting_after``): a client whose connection dropped
resumes after the last chunk it received, without losing or repeating one. A run whose stepping
did not end its stream (cancelled, failed at a shutdown or after its process died) ends with its
stop reason (and the error), made from the run's record.

With ``include_pings``, a ping comes after ``stream_ping_seconds`` without a chunk (not stored,
not numbered).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from fastapi.responses import StreamingResponse

from nightshift.api.deps import AppState
from nightshift.api.letta_messages import LettaView
from nightshift.api.letta_stream import LettaStream, StreamOptions, ending, ping, sse
from nightshift.clock import Clock
from nightshift.domain.agent_runs import AgentRun
from nightshift.domain.messages import Message
from nightshift.domain.run_chunks import ChunkKind, RunChunk
from nightshift.errors import InvalidInput
from nightshift.providers.base import TextDelta, ToolCallDelta
from nightshift.runtime.sync import SyncResult
from nightshift.services import agent_runs
from nightshift.services.agent_runs import Recorder, Send
from nightshift.services.run_streams import PAGE, POLL_SECONDS, ChunkLog, follow


class RecordedStream:
    """A ``SyncListener`` that stores a background run's chunks as ``LettaStream`` makes them."""

    def __init__(self, stream: LettaStream, log: ChunkLog) -> None:
        self._stream = stream
        self._log = log

    @property
    def tokens(self) -> bool:
        """Whether the answers stream in pieces."""
        return self._stream.tokens

    async def messages(self, messages: Sequence[Message]) -> None:
        """A step was written: its chunks are stored now, so that readers see it whole at once."""
        await self._stream.messages(messages)
        self._move()
        await self._log.flush()

    async def delta(self, message_id: str, delta: TextDelta | ToolCallDelta) -> None:
        """A piece of an answer: its chunks are stored with the next batch."""
        await self._stream.delta(message_id, delta)
        self._move()

    def _move(self) -> None:
        queue = self._stream.chunks
        while not queue.empty():
            self._log.add(ChunkKind.DATA, queue.get_nowait())


def recorder(state: AppState, *, tokens: bool, view: LettaView) -> Recorder:
    """How a background run's stream is made: ``LettaStream``'s chunks, and its end."""

    def listen(run: AgentRun, log: ChunkLog) -> RecordedStream:
        return RecordedStream(LettaStream(run.agent_id, tokens=tokens, clock=state.clock, view=view), log)

    def end(run: AgentRun, outcome: SyncResult | Exception) -> list[tuple[ChunkKind, dict[str, Any] | None]]:
        return ending(run.id, outcome)

    return Recorder(listen=listen, ending=end)


async def background_stream(
    state: AppState, org: str, send: Send, *, options: StreamOptions, view: LettaView
) -> StreamingResponse:
    """Step the send's run in the background and answer with its stored stream, followed live.

    Raises:
        NightshiftError: the run was refused before it wrote anything (as the foreground send).
    """
    run = await agent_runs.stream_later(
        state.background, org, send, recorder(state, tokens=options.stream_tokens, view=view)
    )
    return stored_stream(state, org, run.id, after=0, pings=options.include_pings)


def stored_stream(
    state: AppState,
    org: str,
    run_id: str,
    *,
    after: int,
    pings: bool,
    poll_interval: float = POLL_SECONDS,
    page: int = PAGE,
) -> StreamingResponse:
    """The run's stream after ``seq_id`` ``after``, as server-sent events, until its end."""
    chunks = follow(
        state.engine,
        state.background.wakeups,
        state.clock,
        org,
        run_id,
        after=after,
        poll_interval=poll_interval,
        page=page,
    )
    return StreamingResponse(
        _events(chunks, ping_every=state.settings.stream_ping_seconds if pings else None, clock=state.clock),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(
    chunks: AsyncGenerator[RunChunk, None], *, ping_every: float | None, clock: Clock
) -> AsyncIterator[str]:
    """The chunks as server-sent events, with a ping after ``ping_every`` seconds without one."""
    pending: asyncio.Future[RunChunk] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(chunks))
            done, _ = await asyncio.wait({pending}, timeout=ping_every)
            if not done:
                yield sse(ChunkKind.DATA, ping(clock))
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield sse(chunk.kind, chunk.data)
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        await chunks.aclose()


def check_background(run: AgentRun | object) -> AgentRun:
    """The run, if its stream was stored (a background agent run).

    Raises:
        InvalidInput: a foreground run or a batch run, whose stream is not kept (Letta's 400).
    """
    if not isinstance(run, AgentRun) or not run.background:
        raise InvalidInput(
            "Run was not created in background mode, so it cannot be retrieved: "
            "send with background: true (or to /messages/async) to read its stream again",
            field="run_id",
        )
    return run
