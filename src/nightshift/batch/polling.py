"""The poll schedule of a process's running provider batches (see ``domain/polling.py``), with the
providers' turnarounds read from the store now and then rather than at every poll."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.batches import ProviderBatch
from nightshift.domain.polling import Turnarounds, poll_delay
from nightshift.store import provider_batches as batch_store

# The latest ended batches the turnarounds are taken from, of every provider together.
LATEST_ENDS = 1_000
# How long the turnarounds read from the store are used before they are read again.
REFRESH = timedelta(minutes=1)


@dataclass(slots=True, kw_only=True)
class PollSchedule:
    """When each running batch is polled next: between ``shortest`` and ``longest`` apart."""

    engine: AsyncEngine
    shortest: timedelta
    longest: timedelta
    _turnarounds: Turnarounds = field(default_factory=lambda: Turnarounds.of({}))
    _read_at: datetime | None = None

    @property
    def fixed(self) -> bool:
        """The gap is always ``longest`` (the shortest is not shorter): no turnaround to read."""
        return self.shortest >= self.longest

    @property
    def first_gap(self) -> timedelta:
        """The wait between a batch's submit and its first poll: the shortest gap."""
        return poll_delay(timedelta(0), None, shortest=self.shortest, longest=self.longest)

    async def next_poll_at(self, batch: ProviderBatch, now: datetime) -> datetime:
        """When ``batch``, polled at ``now`` and still running, is polled again."""
        if self.fixed:
            return now + self.longest
        submitted = batch.submit_started_at or batch.created_at
        turnaround = (await self.turnarounds(now)).get(batch.provider, batch.model)
        return now + poll_delay(now - submitted, turnaround, shortest=self.shortest, longest=self.longest)

    async def turnarounds(self, now: datetime) -> Turnarounds:
        """The observed turnarounds by provider and model, read at most every ``REFRESH``."""
        if self._read_at is None or now - self._read_at >= REFRESH:
            async with self.engine.connect() as conn:
                self._turnarounds = Turnarounds.of(await batch_store.recent_turnarounds(conn, latest=LATEST_ENDS))
            self._read_at = now
        return self._turnarounds
