"""The FastAPI application, built by ``create_app(settings)`` with an explicit lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import Depends, FastAPI

from nightshift import __version__
from nightshift.api import errors
from nightshift.api.dashboard import routes as dashboard
from nightshift.api.deps import AppState, organization
from nightshift.api.routers import agent_messages, agents, batches, blocks, health, tools
from nightshift.batch.poller import poll_forever
from nightshift.batch.worker import running_worker
from nightshift.config import Settings
from nightshift.store.db import create_engine, upgrade
from nightshift.store.orgs import ensure_default_org

DESCRIPTION = """\
Stateful LLM agents stepped through the providers' batch APIs, behind a Letta-compatible API.

When `NIGHTSHIFT_SERVER_PASSWORD` is set, every route but `/v1/health` needs
`Authorization: Bearer <password or API key>`. An API key (`nightshift keys create`) scopes the
caller to its organization: other organizations' objects answer 404.
"""


def create_app(settings: Settings) -> FastAPI:
    """The app. At startup the database is migrated, the tool sandbox started and the poller launched."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.resolved_database_url, echo=settings.sql_echo)
        try:
            await upgrade(engine)
            async with engine.begin() as conn:
                await ensure_default_org(conn)
            async with running_worker(settings, engine) as worker, httpx.AsyncClient() as http:
                app.state.nightshift = AppState(settings=settings, engine=engine, worker=worker)
                poller = asyncio.create_task(poll_forever(worker, http), name="poller") if settings.poller else None
                try:
                    yield
                finally:
                    if poller is not None:
                        poller.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await poller
        finally:
            await engine.dispose()

    app = FastAPI(title="nightshift", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    errors.install(app)
    app.include_router(health.router)
    app.include_router(dashboard.router)  # public: the page holds no data, its API calls carry the key
    secured = [Depends(organization)]
    for module in (agents, agent_messages, tools, blocks, batches):
        app.include_router(module.router, dependencies=secured)
    return app
