"""Batch-run fixtures: the app with its poller, pointed at the emulator."""

from __future__ import annotations

import httpx
import pytest

from support.runs import Runs


@pytest.fixture
def runs(client: httpx.AsyncClient, emulator: str) -> Runs:
    """Agents and runs through the API, with the SDK variables pointing at the emulator."""
    return Runs(client)
