"""Request dependencies: the caller (its organization, its key) and a transaction per request."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from starlette.datastructures import Headers

from nightshift.batch.callbacks import CallbackRules
from nightshift.batch.poller_process import PollerProcess
from nightshift.batch.worker import Worker
from nightshift.clock import Clock
from nightshift.config import Settings
from nightshift.domain.orgs import DEFAULT_ORG_ID, Caller, CallerKind, KeyStatus
from nightshift.errors import Forbidden, Unauthorized
from nightshift.metrics import Metrics
from nightshift.providers.clients import ProviderSet
from nightshift.services.agent_runs import BackgroundRuns, Stepping
from nightshift.services.catalog import ModelNames
from nightshift.services.keys import KeyUsage, check_manages_keys, key_for_secret
from nightshift.tools.sandbox import Sandbox


@dataclass(frozen=True, slots=True, kw_only=True)
class AppState:
    """The parts built once at startup and shared by every request."""

    settings: Settings
    engine: AsyncEngine
    read_engine: AsyncEngine  # the same pool, for reads outside a transaction (``read_only``)
    providers: ProviderSet
    sandbox: Sandbox
    # What this process did, for ``GET /metrics``.
    metrics: Metrics
    clock: Clock
    # Where callbacks may go and how they are retried: the check of a new run's callback URL.
    callbacks: CallbackRules
    # What a send to one agent, stepped in the request, uses.
    stepping: Stepping
    # The batch worker of this process (its poller's), for the batch runs' requests.
    worker: Worker
    key_usage: KeyUsage
    background: BackgroundRuns  # the message sends this process steps in the background
    # The models an agent may name (the price data's, NIGHTSHIFT_PRICES's and NIGHTSHIFT_EXTRA_MODELS').
    models: ModelNames
    # serve's poller, in a child process; None: the poller (if any) runs on this event loop.
    poller_process: PollerProcess | None = None
    # Set when a run is queued, to wake the poller on this event loop (None: it runs elsewhere).
    runs_queued: asyncio.Event | None = None


async def app_state(request: Request) -> AppState:
    # async, as every dependency here: FastAPI runs a plain function in its thread pool, a
    # thread hop per request for nothing.
    state: AppState = request.app.state.nightshift
    return state


State = Annotated[AppState, Depends(app_state)]


async def request_time(state: State) -> datetime:
    """The time of the request, from the process's clock: what the rows it writes are stamped with.

    Read once per request, so that everything one request writes carries the same time, and from
    the clock the server was built with, so that a test that sets the time sees it on the rows.
    """
    return state.clock.now()


Now = Annotated[datetime, Depends(request_time)]


async def connection(state: State) -> AsyncIterator[AsyncConnection]:
    """One transaction per request: committed when the handler returns, rolled back when it raises."""
    async with state.engine.begin() as conn:
        yield conn


# scope="function": the transaction commits before the response is sent, so what a 2xx reports
# is stored (and visible to the caller's next request), and a failed commit is an error response.
Conn = Annotated[AsyncConnection, Depends(connection, scope="function")]


async def read_connection(state: State) -> AsyncIterator[AsyncConnection]:
    """A connection for a request that only reads: outside a transaction on PostgreSQL.

    Each statement sees what was committed when it started, as in a READ COMMITTED transaction
    (PostgreSQL's default, and ours), without a BEGIN and a COMMIT, two round trips, around a
    read of one or three statements. SQLite holds no transaction for reads either way (Python's
    sqlite3 opens one before a write). Only for handlers that write nothing.
    """
    async with state.read_engine.connect() as conn:
        yield conn


# scope="function": the connection goes back to the pool before the response is sent.
ReadConn = Annotated[AsyncConnection, Depends(read_connection, scope="function")]


def _bearer(headers: Headers) -> str | None:
    header = headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    # Letta's older clients send the key in these headers.
    return headers.get("x-api-key") or headers.get("user-id-token") or None


def _same_secret(token: str, password: str) -> bool:
    """Whether the header's token is the password, in constant time.

    Header values reach us decoded as Latin-1, so encoding the token back gives the bytes the
    client sent; the password is compared as UTF-8. (``hmac.compare_digest`` refuses non-ASCII
    text, so comparing the strings would fail on a token like "pässword".)
    """
    return hmac.compare_digest(token.encode("latin-1", "replace"), password.encode("utf-8", "replace"))


async def authenticate(state: AppState, headers: Headers) -> Caller:
    """Who sent a request with these headers.

    An API key (``nightshift keys create``) maps to its organization; a revoked one is refused.
    The key is looked up in the database on every request (no cache), so a revocation holds at
    the next request in every process: one statement, outside a transaction (the read engine).
    The server password, when set, maps to the default organization; when it is set, a request
    without either is refused. Without a password, a request without a key belongs to the
    default organization.

    Raises:
        Unauthorized: wrong, revoked or (with a password) missing credentials.
    """
    token = _bearer(headers)
    password = state.settings.server_password
    if token is not None:
        if password is not None and _same_secret(token, password.get_secret_value()):
            return Caller(organization_id=DEFAULT_ORG_ID, kind=CallerKind.PASSWORD)
        key = await key_for_secret(state.read_engine, token)
        if key is None:
            raise Unauthorized("the API key or password is not valid")
        if key.status is KeyStatus.REVOKED:
            raise Unauthorized("this API key has been revoked")
        state.key_usage.used(key.id)
        return Caller(
            organization_id=key.organization_id, kind=CallerKind.API_KEY, key_id=key.id, is_admin=key.is_admin
        )
    if password is not None:
        raise Unauthorized("this server needs 'Authorization: Bearer <password or API key>'")
    return Caller(organization_id=DEFAULT_ORG_ID, kind=CallerKind.ANONYMOUS)


# Where ``api/credentials.py`` leaves the caller it found, in the request's state.
CALLER_STATE = "nightshift_caller"


async def caller(request: Request, state: State) -> Caller:
    """Who sent the request: found by ``api/credentials.py`` before the body was read (see
    :func:`authenticate`), or now for a request that did not pass through it."""
    found = getattr(request.state, CALLER_STATE, None)
    if isinstance(found, Caller):
        return found
    return await authenticate(state, request.headers)


CallerDep = Annotated[Caller, Depends(caller)]


async def organization(who: CallerDep) -> str:
    """The caller's organization id (FastAPI runs :func:`caller` once per request for both)."""
    return who.organization_id


Org = Annotated[str, Depends(organization)]


async def key_admin(who: CallerDep) -> Caller:
    """The caller, if it may manage its organization's API keys (403 otherwise)."""
    check_manages_keys(who)
    return who


KeyAdmin = Annotated[Caller, Depends(key_admin)]


async def operator(who: CallerDep, state: State) -> None:
    """Let through only who may see every organization's figures (``GET /metrics``).

    When the server has a password, that is the password alone: an organization's API key is
    refused (403), as is anything else (401, by :func:`caller`). Without a password, everyone,
    like the rest of the API.
    """
    if state.settings.server_password is not None and who.kind is not CallerKind.PASSWORD:
        raise Forbidden("the metrics cover every organization: they need the server password, not an API key")
