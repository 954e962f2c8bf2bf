"""Request and response bodies as the APIs handle them.

A JSON request body is read with a size limit and logged for the admin endpoints; a file (an
upload, a batch's output, error or results file) is streamed back a few hundred pieces at a time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi import Request

from nightshift.emulator.errors import ApiError, invalid
from nightshift.emulator.state import EmulatorState

MAX_BODY_BYTES = 256 * 1024 * 1024
_PIECES_PER_CHUNK = 256


async def read_json(request: Request, state: EmulatorState) -> Any:
    """The request's JSON body (logged), or a 400 / 413 in the API's shape."""
    raw = await request.body()
    received = state.now()  # (a large body takes a while to parse: the log says when it had arrived)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "request_too_large", f"Request exceeds the maximum size of {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        raise invalid("The request body is not valid JSON") from None
    state.log_request(request.method, request.url.path, body, request.headers, at=received)
    return body


async def stream(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    """A file's pieces (its lines, or a stored file's chunks) joined a few hundred at a time.

    A large file streams without being built whole in memory, in chunks big enough to be cheap.
    """
    chunk: list[bytes] = []
    for piece in pieces:
        chunk.append(piece)
        if len(chunk) >= _PIECES_PER_CHUNK:
            yield b"".join(chunk)
            chunk = []
    if chunk:
        yield b"".join(chunk)
