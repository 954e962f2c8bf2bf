"""Reading request bodies as the APIs do: JSON with a size limit, logged for the admin endpoints."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from nightshift.emulator.errors import ApiError, invalid
from nightshift.emulator.state import EmulatorState

MAX_BODY_BYTES = 256 * 1024 * 1024


async def read_json(request: Request, state: EmulatorState) -> Any:
    """The request's JSON body (logged), or a 400 / 413 in the API's shape."""
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "request_too_large", f"Request exceeds the maximum size of {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        raise invalid("The request body is not valid JSON") from None
    state.log_request(request.method, request.url.path, body, request.headers)
    return body
