"""Credentials are checked before anything reads a request's body.

FastAPI reads and decodes a body before it runs a route's dependencies, so a check of the
credentials there comes after the work a stranger's body costs: reading it, decoding it, holding
the event loop meanwhile. This ASGI middleware sits in front of the body limits: a request to a
route that needs credentials, without valid ones, is answered 401 from its headers alone, and a
caller it lets through is left in the request's state for the ``caller`` dependency
(``api/deps.py``), so the key is looked up once.
"""

from __future__ import annotations

from typing import Final

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from nightshift.api.deps import CALLER_STATE, AppState, authenticate
from nightshift.api.errors import ErrorResponse
from nightshift.errors import Unauthorized

# OpenAI's batch webhooks (``routers/webhooks.py``).
WEBHOOK_PATH: Final = "/v1/webhooks/openai"
# A webhook's body is an event of a few hundred bytes: read no more than this of a stranger's.
WEBHOOK_BYTES: Final = 64 * 1024
# The routes anyone may call: liveness and readiness, the dashboard's page (its API calls carry the
# key), the API's description and the providers' webhooks (each taken only with the provider's
# signature). Every other path, an unknown one too, needs credentials.
PUBLIC_PATHS: Final = frozenset(
    {
        "/v1/health",
        "/v1/health/",
        "/v1/ready",
        "/v1/ready/",
        "/",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        WEBHOOK_PATH,
    }
)
PUBLIC_PREFIXES: Final = ("/dashboard/",)


def is_public(path: str) -> bool:
    """Whether ``path`` answers without credentials."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class CredentialsFirst:
    """ASGI middleware: the caller of every route but the public ones, found from the headers
    before the body is read; a 401 without reading it when the credentials are not valid."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        state: AppState = scope["app"].state.nightshift
        try:
            who = await authenticate(state, Headers(scope=scope))
        except Unauthorized as exc:
            response = ErrorResponse({"detail": exc.message}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[CALLER_STATE] = who
        await self.app(scope, receive, send)
