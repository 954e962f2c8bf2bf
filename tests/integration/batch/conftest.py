"""Batch-run fixtures: the app with its poller, pointed at the emulator.

``@pytest.mark.settings(name=value, ...)`` builds the test's app with other settings (a short tool
timeout, a lower default step limit, fast callback retries).
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from nightshift.config import Settings
from support.runs import Runs


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "settings(**values): build the test's app with these settings")


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The suite's settings, with the values of the test's ``settings`` markers (module and test), if any."""
    values: dict[str, object] = {}
    for marker in reversed(list(request.node.iter_markers("settings"))):  # the test's own win
        values.update(marker.kwargs)
    if not values:
        return settings
    return Settings.model_validate({**settings.model_dump(), **values})


@pytest.fixture
def runs(client: httpx.AsyncClient, emulator: str, app: FastAPI, settings: Settings) -> Runs:
    """Agents and runs through the API, with the SDK variables pointing at the emulator; without
    a poller (the test drives the worker) a run is started by the worker as the POST returns."""
    return Runs(client, worker=None if settings.poller else app.state.nightshift.worker)
