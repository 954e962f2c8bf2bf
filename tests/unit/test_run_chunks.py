"""The end of a background run's stream made from its record (``domain.run_chunks.ended_stream``)."""

from __future__ import annotations

from datetime import UTC, datetime

from nightshift.domain.agent_runs import AgentRun, AgentRunStatus
from nightshift.domain.run_chunks import ChunkKind, RunChunk, ended_stream

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def run(status: AgentRunStatus, **fields: str) -> AgentRun:
    return AgentRun(
        id="run-1",
        organization_id="org-1",
        agent_id="agent-1",
        status=status,
        background=True,
        created_at=NOW,
        updated_at=NOW,
        **fields,  # type: ignore[arg-type]
    )


def test_a_cancelled_run_ends_with_its_stop_reason_numbered_after_the_stored_chunks() -> None:
    assert ended_stream(run(AgentRunStatus.CANCELLED, stop_reason="cancelled"), last_seq_id=7) == [
        RunChunk(
            seq_id=8,
            kind=ChunkKind.DATA,
            data={"message_type": "stop_reason", "stop_reason": "cancelled", "run_id": "run-1", "seq_id": 8},
        ),
        RunChunk(seq_id=9, kind=ChunkKind.DONE),
    ]


def test_a_failed_run_ends_with_its_error() -> None:
    stop, error, done = ended_stream(
        run(AgentRunStatus.FAILED, stop_reason="error", error="the server stopped"), last_seq_id=0
    )
    assert stop.data == {"message_type": "stop_reason", "stop_reason": "error", "run_id": "run-1", "seq_id": 1}
    assert error.kind is ChunkKind.ERROR and error.seq_id == 2
    assert error.data == {
        "message_type": "error_message",
        "error_type": "internal_error",
        "message": "the server stopped",
        "detail": None,
        "run_id": "run-1",
        "seq_id": 2,
    }
    assert done == RunChunk(seq_id=3, kind=ChunkKind.DONE)


def test_the_end_is_the_same_each_time_it_is_made() -> None:
    failed = run(AgentRunStatus.FAILED, error="lost")
    assert ended_stream(failed, last_seq_id=3) == ended_stream(failed, last_seq_id=3)
    assert ended_stream(failed, last_seq_id=3)[0].data == {
        "message_type": "stop_reason",
        "stop_reason": "error",
        "run_id": "run-1",
        "seq_id": 4,
    }
