"""The request body limits, checked before a body is parsed: a JSON 413 when one is passed.

A body that declares its length (``Content-Length``) over the route's size limit is refused
before a byte of it is read; one sent in chunks is counted as it arrives and refused once it
passes the limit. (Starlette's own limiter answers a declared length with a plain-text 413,
whatever the app's error handlers say, hence this one.)

A JSON body is also read whole here and its values counted (``domain.limits.json_values_over``)
before FastAPI decodes it: decoding is C code that holds the event loop for as long as it runs,
on a thread too, and what it costs grows with the number of values, so a body of millions of
tiny values is refused instead of decoded. Requests run inside ``input.body_check`` so that the
storability walk of a large body can run on a thread (``api/input.py``).

A body must also arrive whole within ``body_seconds`` of the first read (a 408 otherwise), so that
a client sending it a byte at a time does not hold its connection and its request for good.

Credentials are checked before any of this (``api/credentials.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nightshift.api.errors import ErrorResponse
from nightshift.api.input import body_check, is_json
from nightshift.domain.limits import json_values_over

MEGABYTE = 1024 * 1024


class BodyTooLarge(HTTPException):
    """The body passed ``limit`` bytes. An ``HTTPException``, so FastAPI lets it through to the handlers."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=too_large(limit))
        self.limit = limit


class BodyTooSlow(HTTPException):
    """The body did not arrive within its time. An ``HTTPException``, so FastAPI lets it through to the handlers."""

    def __init__(self, seconds: float) -> None:
        super().__init__(status_code=408, detail=too_slow(seconds))


def too_slow(seconds: float) -> str:
    """The error message for a body that did not arrive within ``seconds``."""
    return (
        f"the request body did not arrive within {seconds:g} s (NIGHTSHIFT_BODY_TIMEOUT_SECONDS); send it faster, "
        "or in smaller requests"
    )


def too_large(limit: int) -> str:
    """The error message for a body over ``limit`` bytes."""
    return f"the request body is over this route's limit of {limit // MEGABYTE} MB"


def too_many_values(limit: int) -> str:
    """The error message for a JSON body of more than ``limit`` values."""
    return (
        f"the request body holds more than {limit:,} JSON values (strings, numbers, keys, arrays, objects): "
        "send them in several requests, or raise NIGHTSHIFT_MAX_REQUEST_VALUES"
    )


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one route's request bodies may hold: bytes, and JSON values (see the module docstring)."""

    size: int
    values: int


class BodyLimit:
    """ASGI middleware: bodies within ``default``, or ``by_path[path]`` on those paths, each body
    whole within ``body_seconds``."""

    def __init__(self, app: ASGIApp, *, default: Bounds, by_path: Mapping[str, Bounds], body_seconds: float) -> None:
        self.app = app
        self.default = default
        self.by_path = dict(by_path)
        self.body_seconds = body_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bounds = self.by_path.get(scope["path"], self.default)
        limit = bounds.size
        headers = Headers(scope=scope)
        declared = _content_length(headers)
        if declared is not None and declared > limit:
            await _refuse(too_large(limit), scope, receive, send)
            return
        if is_json(headers.get("content-type")) and declared != 0:
            await self._json(scope, receive, send, bounds)
            return
        received = 0
        complete = False
        deadline: float | None = None

        async def limited() -> Message:
            nonlocal received, complete, deadline
            if complete:
                return await receive()  # the client's disconnect, once the body was read
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + self.body_seconds
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow(self.body_seconds) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
                complete = not message.get("more_body", False)
            return message

        await self.app(scope, limited, send)

    async def _json(self, scope: Scope, receive: Receive, send: Send, bounds: Bounds) -> None:
        """Read the whole body (up to ``bounds.size`` bytes), count its values, then hand it to the app."""
        limit = bounds.size
        chunks: list[bytes] = []
        received = 0
        more = True
        try:
            async with asyncio.timeout(self.body_seconds):
                while more:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away: nobody to answer
                    chunk = message.get("body", b"")
                    received += len(chunk)
                    if received > limit:
                        await _refuse(too_large(limit), scope, receive, send)
                        return
                    chunks.append(chunk)
                    more = message.get("more_body", False)
        except TimeoutError:
            await _refuse(too_slow(self.body_seconds), scope, receive, send, status=408)
            return
        body = b"".join(chunks)
        # The count is at most one more than the body's bytes: a body shorter than the limit cannot
        # pass it, and needs no counting.
        if len(body) >= bounds.values and await asyncio.to_thread(json_values_over, body, bounds.values):
            await _refuse(too_many_values(bounds.values), scope, receive, send)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # the client's disconnect, once the body was read
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        with body_check():
            await self.app(scope, replay, send)


async def _refuse(detail: str, scope: Scope, receive: Receive, send: Send, *, status: int = 413) -> None:
    await ErrorResponse({"detail": detail}, status_code=status)(scope, receive, send)


def _content_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
