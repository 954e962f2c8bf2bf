"""Request dependencies: the caller's organization and a transaction per request."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.worker import Worker
from nightshift.config import Settings
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.errors import Forbidden, Unauthorized
from nightshift.store.orgs import org_for_api_key


@dataclass(frozen=True, slots=True, kw_only=True)
class AppState:
    """The parts built once at startup and shared by every request."""

    settings: Settings
    engine: AsyncEngine
    worker: Worker


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.nightshift
    return state


State = Annotated[AppState, Depends(app_state)]


async def connection(state: State) -> AsyncIterator[AsyncConnection]:
    """One transaction per request: committed when the handler returns, rolled back when it raises."""
    async with state.engine.begin() as conn:
        yield conn


# scope="function": the transaction commits before the response is sent, so what a 2xx reports
# is stored (and visible to the caller's next request), and a failed commit is an error response.
Conn = Annotated[AsyncConnection, Depends(connection, scope="function")]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    # Letta's older clients send the key in these headers.
    return request.headers.get("x-api-key") or request.headers.get("user-id-token") or None


def _same_secret(token: str, password: str) -> bool:
    """Whether the header's token is the password, in constant time.

    Header values reach us decoded as Latin-1, so encoding the token back gives the bytes the
    client sent; the password is compared as UTF-8. (``hmac.compare_digest`` refuses non-ASCII
    text, so comparing the strings would fail on a token like "pässword".)
    """
    return hmac.compare_digest(token.encode("latin-1", "replace"), password.encode("utf-8", "replace"))


async def organization(request: Request, state: State) -> str:
    """The caller's organization id.

    An API key (``nightshift keys create``) maps to its organization. The server password, when
    set, maps to the default organization; when it is set, a request without either is refused.
    Without a password, a request without a key belongs to the default organization.
    """
    token = _bearer(request)
    password = state.settings.server_password
    if token is not None:
        if password is not None and _same_secret(token, password.get_secret_value()):
            return DEFAULT_ORG_ID
        async with state.engine.connect() as conn:
            org_id = await org_for_api_key(conn, token)
        if org_id is not None:
            return org_id
        raise Unauthorized("the API key or password is not valid")
    if password is not None:
        raise Unauthorized("this server needs 'Authorization: Bearer <password or API key>'")
    return DEFAULT_ORG_ID


Org = Annotated[str, Depends(organization)]


async def operator(request: Request, state: State) -> None:
    """Let through only who may see every organization's figures (``GET /metrics``).

    When the server has a password, that is the password alone: an organization's API key is
    refused (403), as is anything else (401). Without a password, everyone, like the rest of the API.
    """
    password = state.settings.server_password
    if password is None:
        return
    token = _bearer(request)
    if token is None:
        raise Unauthorized("this server needs 'Authorization: Bearer <password>'")
    if _same_secret(token, password.get_secret_value()):
        return
    async with state.engine.connect() as conn:
        org_id = await org_for_api_key(conn, token)
    if org_id is not None:
        raise Forbidden("the metrics cover every organization: they need the server password, not an API key")
    raise Unauthorized("the password is not valid")
