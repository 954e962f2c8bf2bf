"""Batch-run fixtures: the app with its poller, pointed at the emulator (``runs``), or without a
poller over the scripted provider, stepped by the test (``stepped``).

``@pytest.mark.settings(name=value, ...)`` (``tests/conftest.py``) builds the test's app with other
settings (a short tool timeout, a lower default step limit, fast callback retries).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from nightshift.api.app import create_app
from nightshift.config import Settings
from support.runs import Runs
from support.scripted import ScriptedModel
from support.stepped import SteppedRuns


@pytest.fixture
def runs(client: httpx.AsyncClient, emulator: str, app: FastAPI, settings: Settings) -> Runs:
    """Agents and runs through the API, with the SDK variables pointing at the emulator; without
    a poller (the test drives the worker) a run is started by the worker as the POST returns."""
    return Runs(client, worker=None if settings.poller else app.state.nightshift.worker)


# Logic tests: the app without its poller, over the scripted provider, stepped by explicit passes.


@pytest.fixture
def scripted() -> ScriptedModel:
    """The scripted provider's state: what the model answers and what it was asked."""
    return ScriptedModel()


@pytest.fixture
async def stepped_app(settings: Settings, scripted: ScriptedModel) -> AsyncIterator[FastAPI]:
    """The app with no poller, every provider the scripted one, and every stage due at once."""
    quiet = settings.model_copy(update={"poller": False, "poll_interval_seconds": 0.0})
    application = create_app(quiet, providers=scripted.providers())
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def stepped(stepped_app: FastAPI, scripted: ScriptedModel) -> AsyncIterator[SteppedRuns]:
    """Agents and runs through the API, moved on by the test's own worker passes."""
    transport = httpx.ASGITransport(app=stepped_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as http:
        yield SteppedRuns(http, stepped_app.state.nightshift.worker, scripted)
