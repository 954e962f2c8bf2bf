"""Telling a run's ``callback_url`` that the run ended: POSTed once, retried with backoff."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.batches import BatchRun
from nightshift.store import batches as batch_store
from nightshift.store.tables import batch_runs

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BASE_DELAY = timedelta(seconds=2)
# While one process sends a callback, others leave it alone for this long.
SEND_CLAIM = timedelta(seconds=60)


def payload(run: BatchRun) -> dict[str, str | None]:
    """Letta's callback body."""
    return {
        "job_id": run.id,
        "status": run.status.value,
        "completed_at": run.completed_at.isoformat() if run.completed_at else None,
    }


async def send_due_callbacks(
    engine: AsyncEngine, http: httpx.AsyncClient, *, limit: int = 20, base_delay: timedelta = BASE_DELAY
) -> int:
    """POST the callbacks of ended runs that are due; returns how many were attempted.

    A non-2xx answer or a network error is retried after ``base_delay`` (2 s by default), then
    twice, four and eight times as long; after the fifth failure the run keeps the last error in
    ``callback_error`` and nothing more is sent.
    """
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        due = await batch_store.callbacks_due(conn, now, limit=limit)
        claimed = []
        for run in due:
            # Claim this attempt, so that two server processes do not both send it.
            result = await conn.execute(
                update(batch_runs)
                .where(batch_runs.c.id == run.id, batch_runs.c.callback_attempts == run.callback_attempts)
                .values(callback_next_at=now + SEND_CLAIM, callback_attempts=run.callback_attempts + 1)
            )
            if result.rowcount:
                claimed.append(run)
    for run in claimed:
        attempts = run.callback_attempts + 1
        assert run.callback_url is not None
        try:
            response = await http.post(run.callback_url, json=payload(run), timeout=10)
            ok, code, error = response.is_success, response.status_code, None
            if not ok:
                error = f"callback answered HTTP {code}"
        except httpx.HTTPError as exc:
            ok, code, error = False, None, f"callback failed: {type(exc).__name__}: {exc}"
        give_up = not ok and attempts >= MAX_ATTEMPTS
        async with engine.begin() as conn:
            await batch_store.record_callback(
                conn,
                run.id,
                attempts=attempts,
                sent_at=datetime.now(UTC) if ok or give_up else None,
                status_code=code,
                error=error,
                next_at=None if ok or give_up else datetime.now(UTC) + base_delay * 2 ** (attempts - 1),
            )
        if error:
            log.warning("run %s: %s (attempt %d)", run.id, error, attempts)
    return len(claimed)
