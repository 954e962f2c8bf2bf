"""What a poller keeps in memory for its next steps, as its settings say
(``NIGHTSHIFT_MESSAGE_CACHE_MB``, ``NIGHTSHIFT_AGENT_CACHE_MB``)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

CACHES = [("messages", "message_cache_mb", 64), ("agents", "agent_cache_mb", 128)]


@pytest.mark.parametrize(("part", "setting", "default_mb"), CACHES, ids=[c[0] for c in CACHES])
async def test_a_poller_keeps_its_default_size(app: FastAPI, part: str, setting: str, default_mb: int) -> None:
    cache = getattr(app.state.nightshift.worker.parts, part)
    assert cache is not None and cache.held.max_bytes == default_mb * 2**20


@pytest.mark.parametrize(
    "part",
    [pytest.param(part, marks=pytest.mark.settings(**{setting: 0}), id=part) for part, setting, _ in CACHES],
)
async def test_a_poller_keeps_nothing_when_told(app: FastAPI, part: str) -> None:
    assert getattr(app.state.nightshift.worker.parts, part) is None
