"""The FastAPI application, built by ``create_app(settings)`` with an explicit lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from nightshift import __version__
from nightshift.api import errors
from nightshift.api.deps import AppState, organization
from nightshift.api.routers import agents, blocks, health, tools
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
    """The app. The database is migrated and the default organization created at startup."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.resolved_database_url, echo=settings.sql_echo)
        try:
            await upgrade(engine)
            async with engine.begin() as conn:
                await ensure_default_org(conn)
            app.state.nightshift = AppState(settings=settings, engine=engine)
            yield
        finally:
            await engine.dispose()

    app = FastAPI(title="nightshift", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    errors.install(app)
    app.include_router(health.router)
    secured = [Depends(organization)]
    for module in (agents, tools, blocks):
        app.include_router(module.router, dependencies=secured)
    return app
