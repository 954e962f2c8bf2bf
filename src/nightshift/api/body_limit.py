"""The request body size limit, checked before a body is parsed: a JSON 413 when it is over.

A body that declares its length (``Content-Length``) over the limit is refused before a byte of
it is read; one sent in chunks is counted as it arrives and refused once it passes the limit.
(Starlette's own limiter answers a declared length with a plain-text 413, whatever the app's
error handlers say, hence this one.)
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nightshift.api.errors import ErrorResponse

MEGABYTE = 1024 * 1024


class BodyTooLarge(HTTPException):
    """The body passed ``limit`` bytes. An ``HTTPException``, so FastAPI lets it through to the handlers."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=too_large(limit))
        self.limit = limit


def too_large(limit: int) -> str:
    """The error message for a body over ``limit`` bytes."""
    return f"the request body is over this route's limit of {limit // MEGABYTE} MB"


class BodyLimit:
    """ASGI middleware: bodies of at most ``default`` bytes, or ``by_path[path]`` on those paths."""

    def __init__(self, app: ASGIApp, *, default: int, by_path: Mapping[str, int]) -> None:
        self.app = app
        self.default = default
        self.by_path = dict(by_path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.by_path.get(scope["path"], self.default)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await ErrorResponse({"detail": too_large(limit)}, status_code=413)(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
