"""The metrics of ``GET /metrics``: this process's figures, and the cluster's read from the database."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.metrics import Metrics
from nightshift.store.census import batch_census


async def exposition(engine: AsyncEngine, metrics: Metrics, *, now: datetime, others: Sequence[str] = ()) -> bytes:
    """Every figure in Prometheus's text format; the cluster's are read now, in three statements, and the
    poller's lag is how long before ``now`` the oldest batch fell due.
    ``others``: child processes' own figures, added to this process's (see ``Metrics.exposition``)."""
    async with engine.connect() as conn:
        census = await batch_census(conn)
    return metrics.exposition(census, now, others=others)
