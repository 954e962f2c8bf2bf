"""The stored stream of a background agent run: its chunks, numbered from 1 (Letta's ``seq_id``).

A background run (``background: true`` on a streamed send, or ``.../messages/async``) writes each
chunk its stream sends to the database as it goes, so that a client can read it again from any
point (``POST /v1/runs/{id}/stream`` with ``starting_after``), from any server process. A stream
ends with a ``DONE`` chunk; a run ended by something else than its own stepping (a cancel, a
crash, a shutdown) has none stored, and its end is made from the run's record as it is read
(``ended_stream``), the same each time, since nothing is appended to an ended run's stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from nightshift.domain.agent_runs import AgentRun, AgentRunStatus


class ChunkKind(StrEnum):
    """What one chunk of a stream is."""

    DATA = "data"  # a message, a stop reason or the usage: a ``data:`` event
    ERROR = "error"  # the run failed: an ``event: error`` (Letta's error message)
    DONE = "done"  # the stream's last chunk (``data: [DONE]``)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunChunk:
    """One chunk of a run's stream: its number, its kind and its JSON object (none for DONE)."""

    seq_id: int
    kind: ChunkKind
    data: dict[str, Any] | None = None


def ended_stream(run: AgentRun, *, last_seq_id: int) -> list[RunChunk]:
    """The end of the stream of ``run``, ended without its stepping writing one (cancelled, or
    failed by a crash or a shutdown), numbered after the last stored chunk ``last_seq_id``."""
    stop = run.stop_reason or ("cancelled" if run.status is AgentRunStatus.CANCELLED else "error")
    parts: list[tuple[ChunkKind, dict[str, Any] | None]] = [
        (ChunkKind.DATA, {"message_type": "stop_reason", "stop_reason": stop})
    ]
    if run.status is AgentRunStatus.FAILED:
        error = {
            "message_type": "error_message",
            "error_type": "internal_error",
            "message": run.error or "the run failed",
            "detail": None,
        }
        parts.append((ChunkKind.ERROR, error))
    parts.append((ChunkKind.DONE, None))
    return [
        RunChunk(
            seq_id=last_seq_id + n,
            kind=kind,
            data=None if data is None else {**data, "run_id": run.id, "seq_id": last_seq_id + n},
        )
        for n, (kind, data) in enumerate(parts, start=1)
    ]
