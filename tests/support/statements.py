"""The SQL statements an engine sends, recorded for a test."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

# What a server sends with time, not with any request or agent: the renewal of its batches' leases,
# its look for background runs whose process died (every third of a lease, in every server), and
# the providers' turnarounds (read once a minute by the poll schedule and the cache policy).
PERIODIC = (
    re.compile(r"\s*UPDATE provider_batches SET lease_expires_at=[^,]* WHERE", re.I),
    re.compile(
        r"\s*SELECT agent_runs\.id\b.*\bWHERE agent_runs\.status IN .* AND agent_runs\.lease_until <", re.I | re.S
    ),
    re.compile(
        r"\s*SELECT provider_batches\.provider, provider_batches\.model, provider_batches\.submit_started_at\b", re.I
    ),
)


@contextmanager
def statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """The SQL statements the engine sends in the block, but for those it sends with time (``PERIODIC``),
    which a slow machine may see fall in any block."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not any(p.match(statement) for p in PERIODIC):
            seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
