"""A process's leases on provider batches: taken, renewed while a stage works, given back.

A batch is worked on by whoever holds its lease (owner, expiry). The owner renews it while a
stage runs (``holding``), so a lease outlives a dead owner by ``lease_seconds`` only: its batches
are taken over that soon. A stage releases nothing itself beyond its own transition's writes; the
worker's loop gives a lease back (``release``, ``record_failure``) once it knows how the stage went.
A process about to exit gives back every lease of its own at once (``give_back_all``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.clock import Clock
from nightshift.domain.batches import ProviderBatch
from nightshift.store import provider_batches as batch_store

log = logging.getLogger(__name__)


def worker_id() -> str:
    """A name for a lease owner of this process: host, pid and a random part."""
    return f"{process_prefix()}{uuid.uuid4().hex[:8]}"


def process_prefix() -> str:
    """How every lease owner of this process begins: ``host:pid:``."""
    return f"{socket.gethostname()}:{os.getpid()}:"


@dataclass(frozen=True, slots=True, kw_only=True)
class Leases:
    """The leases one owner (a poller, or an API request) holds."""

    owner: str
    lease_seconds: float
    clock: Clock
    engine: AsyncEngine

    def lease(self) -> tuple[str, datetime]:
        """A lease on batches the owner creates and submits at once, so that no poller takes them."""
        return self.owner, self.clock.now() + timedelta(seconds=self.lease_seconds)

    def for_request(self) -> Leases:
        """Leases under an owner name of their own, for work done outside the poller (an API request).

        The poller of this process holds its batches under ``owner``: a batch a request holds
        (one it creates, or cancels while the poller works on it) must not be released, renewed
        or submitted by the poller as if it held it.
        """
        return replace(self, owner=worker_id())

    @asynccontextmanager
    async def holding(self, batch_id: str) -> AsyncIterator[None]:
        """Renew the lease on a batch while the block runs (a stage may outlast one lease).

        The renewals come every third of a lease in real time: they keep a live owner's lease from
        expiring, whatever the clock says.
        """
        done = asyncio.Event()

        async def renew() -> None:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.lease_seconds / 3):
                        await done.wait()
                if done.is_set():
                    return
                expires = self.clock.now() + timedelta(seconds=self.lease_seconds)
                try:
                    async with self.engine.begin() as conn:
                        if not await batch_store.renew_lease(conn, batch_id, self.owner, expires):
                            return  # released (or taken over): nothing left to renew
                except Exception:
                    log.warning("renewing the lease on %s failed; trying again", batch_id, exc_info=True)

        # Stopped with an event rather than cancelled, so that a renewal is never cut mid-transaction.
        renewer = asyncio.create_task(renew(), name=f"lease-{batch_id}")
        try:
            yield
        finally:
            done.set()
            await renewer

    async def release(self, batch: ProviderBatch, *, delay: timedelta) -> None:
        """Give up the lease on ``batch``; it is due again after ``delay``."""
        async with self.engine.begin() as conn:
            await batch_store.release(conn, batch.id, self.owner, next_poll_at=self.clock.now() + delay)

    async def record_failure(self, batch: ProviderBatch, *, failures: int, error: str, delay: timedelta) -> None:
        """Give up the lease on a batch whose stage failed; it is tried again after ``delay``."""
        async with self.engine.begin() as conn:
            await batch_store.record_failure(
                conn, batch.id, self.owner, failures=failures, error=error, next_poll_at=self.clock.now() + delay
            )

    async def give_back_all(self) -> int:
        """Release every lease this process holds (its poller's and its requests'), due at once.

        For a process about to exit: another process takes its batches over at its next poll. A
        stage still running here is redone there; its compare-and-set transitions keep that safe.
        Returns how many leases were given back.
        """
        async with self.engine.begin() as conn:
            return await batch_store.release_all_of(conn, process_prefix(), self.clock.now())
