"""The poller loop that runs inside ``nightshift serve`` (and once for ``nightshift poll --once``)."""

from __future__ import annotations

import asyncio
import logging

import httpx

from nightshift.batch.callbacks import send_due_callbacks
from nightshift.batch.worker import Worker

log = logging.getLogger(__name__)

# Rounds of claiming in one pass: work that becomes due within the pass is done in the same pass.
MAX_ROUNDS = 100


async def poll_once(worker: Worker, http: httpx.AsyncClient) -> int:
    """One pass: advance every due provider batch, then send due callbacks. Returns the work done."""
    handled = 0
    for _ in range(MAX_ROUNDS):
        claimed = await worker.run_once()
        handled += claimed
        if claimed == 0:
            break
    return handled + await send_due_callbacks(
        worker.engine, http, base_delay=worker.callback_retry_delay, allow_private=worker.callback_allow_private
    )


async def poll_forever(worker: Worker, http: httpx.AsyncClient) -> None:
    """Poll every ``worker.poll_interval`` seconds until cancelled; errors are logged, never fatal."""
    while True:
        try:
            await poll_once(worker, http)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("poller pass failed; trying again")
        await asyncio.sleep(worker.poll_interval)
