"""The FastAPI application, built by ``create_app(settings)`` with an explicit lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta

from fastapi import FastAPI
from starlette.routing import BaseRoute

from nightshift import __version__
from nightshift.api import errors
from nightshift.api.body_limit import MEGABYTE, BodyLimit, Bounds
from nightshift.api.credentials import WEBHOOK_BYTES, WEBHOOK_PATH, CredentialsFirst
from nightshift.api.dashboard import routes as dashboard
from nightshift.api.deps import AppState
from nightshift.api.routers import (
    agent_files,
    agent_messages,
    agent_stream,
    agents,
    archival,
    batches,
    blocks,
    catalog,
    groups,
    health,
    keys,
    metrics,
    runs,
    tools,
    webhooks,
)
from nightshift.api.routers.health import Readiness, set_readiness
from nightshift.batch.callbacks import CallbackRules
from nightshift.batch.poller import drain, poll_forever
from nightshift.batch.poller_process import PollerProcess
from nightshift.batch.worker import lease_seconds, worker_of
from nightshift.clock import SYSTEM_CLOCK, Clock
from nightshift.config import Settings
from nightshift.domain.limits import MAX_BATCH_REQUEST_MB, MAX_BATCH_REQUEST_VALUES
from nightshift.parts import running_parts
from nightshift.providers.base import ModelProvider
from nightshift.services.agent_runs import BackgroundRuns, Stepping, fail_stopped_runs
from nightshift.services.catalog import ModelNames
from nightshift.services.keys import KeyUsage
from nightshift.store.checkpoints import checkpointing
from nightshift.store.db import create_engine, read_only, upgrade
from nightshift.store.orgs import ensure_default_org
from nightshift.tracing import instrument_app

DESCRIPTION = """\
Stateful LLM agents stepped through the providers' batch APIs, behind a Letta-compatible API.

When `NIGHTSHIFT_SERVER_PASSWORD` is set, every route but `/v1/health` and `/v1/ready` needs
`Authorization: Bearer <password or API key>`, checked before the request's body is read. An API
key (`nightshift keys create`) scopes the caller to its organization: other organizations' objects
answer 404. `/v1/keys` manages the caller's organization's keys, with an admin key or the server
password (default organization).
`/metrics` covers every organization: it takes the password only.
"""


def create_app(
    settings: Settings,
    *,
    poller_process: bool = False,
    clock: Clock = SYSTEM_CLOCK,
    providers: Mapping[str, ModelProvider] | None = None,
) -> FastAPI:
    """The app. At startup the database is migrated, the tool sandbox started and the poller launched:
    on this event loop, or with ``poller_process`` (``serve``'s default) in a child process
    (``batch/poller_process.py``) so that batch work never holds the loop that answers requests.

    At shutdown (uvicorn runs it after SIGTERM or SIGINT, once the requests in flight are answered)
    the poller claims nothing more and finishes its stage, for ``shutdown_grace_seconds`` at most,
    then every lease of this process is given back so that another process takes over at once (a
    child poller gets SIGTERM and does the same with its own).

    ``clock``: the time this process stamps what it writes with and decides by, in requests and
    in batch work alike (a test's, to let time pass at once);
    ``providers`` replaces the real provider of some names (a scripted one, in tests).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(
            settings.resolved_database_url, echo=settings.sql_echo, pool_size=settings.database_pool_size
        )
        try:
            await upgrade(engine)
            async with engine.begin() as conn:
                await ensure_default_org(conn, clock.now())
                await fail_stopped_runs(conn, clock.now())
            async with (
                running_parts(settings, engine, clock=clock, providers=providers) as parts,
                checkpointing(engine),
            ):
                worker = worker_of(parts)
                callbacks = CallbackRules.of(settings)
                stepping = Stepping(
                    engine=engine,
                    providers=parts.providers,
                    sandbox=parts.sandbox,
                    clock=clock,
                    summary_model=settings.summary_model,
                    cache_policy=settings.cache_policy,
                )
                key_usage = KeyUsage(engine, clock=clock)
                lease = timedelta(seconds=lease_seconds(settings.poll_interval_seconds, settings.lease_seconds))
                background = BackgroundRuns(stepping, callbacks, lease=lease)
                background.watch()
                child = (
                    PollerProcess(grace=settings.shutdown_grace_seconds) if settings.poller and poller_process else None
                )
                # A poller on this event loop is woken by the requests that queue a run.
                runs_queued = asyncio.Event() if settings.poller and child is None else None
                app.state.nightshift = AppState(
                    settings=settings,
                    engine=engine,
                    read_engine=read_only(engine),
                    providers=parts.providers,
                    sandbox=parts.sandbox,
                    metrics=parts.metrics,
                    clock=clock,
                    callbacks=callbacks,
                    stepping=stepping,
                    worker=worker,
                    key_usage=key_usage,
                    background=background,
                    models=ModelNames.of(parts.prices, settings.extra_models),
                    poller_process=child,
                    runs_queued=runs_queued,
                )
                poller = None
                if child is not None:
                    await child.start()
                elif settings.poller:
                    poller = asyncio.create_task(
                        poll_forever(worker, callbacks, wake=runs_queued, queue_seconds=settings.run_queue_seconds),
                        name="poller",
                    )
                set_readiness(app, Readiness.READY)
                try:
                    yield
                finally:
                    set_readiness(app, Readiness.DRAINING)
                    # The child drains its stage while this process closes its own work.
                    stopping = asyncio.create_task(child.stop()) if child is not None else None
                    await background.close()
                    await drain(worker, poller, grace=settings.shutdown_grace_seconds)
                    if stopping is not None:
                        await stopping
                    await key_usage.settled()  # the last uses of keys are written before the engine closes
        finally:
            await engine.dispose()

    app = FastAPI(
        title="nightshift",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # FastAPI's own telemetry would record query strings and request values: our spans come
        # from nightshift.tracing, which leaves them out.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    set_readiness(app, Readiness.STARTING)
    instrument_app(app)  # a span per request when OTEL_EXPORTER_OTLP_ENDPOINT is set
    errors.install(app)
    # A batch run's messages may hold MAX_INPUT_BYTES (100 MB) of text: its body may be larger.
    app.add_middleware(
        BodyLimit,
        default=Bounds(size=settings.max_request_mb * MEGABYTE, values=settings.max_request_values),
        by_path={
            "/v1/messages/batches": Bounds(
                size=max(MAX_BATCH_REQUEST_MB, settings.max_request_mb) * MEGABYTE,
                values=max(MAX_BATCH_REQUEST_VALUES, settings.max_request_values),
            ),
            WEBHOOK_PATH: Bounds(size=WEBHOOK_BYTES, values=WEBHOOK_BYTES),
        },
        body_seconds=settings.body_timeout_seconds,
    )
    # Added last, so it runs first: a stranger's request is answered before its body is read.
    app.add_middleware(CredentialsFirst)
    app.router.routes.extend(api_routes())
    return app


# The API's routers in the order their routes are matched: the public ones first (health and
# readiness, the dashboard's page, the metrics behind the server password, the providers'
# webhooks taken on their signatures), then the API proper, each made by ``routers.secured``.
_ROUTERS = (
    health,
    dashboard,
    metrics,
    webhooks,
    agents,
    archival,
    agent_files,
    tools,
    blocks,
    catalog,
    groups,
    agent_messages,
    runs,
    batches,
    agent_stream,
    keys,
)


def api_routes() -> tuple[BaseRoute, ...]:
    """Every route of the API, as its router declared it (and FastAPI built it, once per process).

    No router here has startup handlers or a lifespan of its own (the app's lifespan above starts
    everything), so its routes are all the app needs of it.
    """
    return tuple(route for module in _ROUTERS for route in module.router.routes)
