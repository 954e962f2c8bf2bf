"""The Anthropic Messages API: ``POST /v1/messages`` (base URL without ``/v1``).

Any ``anthropic-version`` and either auth header are accepted (auth is checked by the middleware);
``?beta=true`` from old SDKs is ignored.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from nightshift.emulator import anthropic_api as api
from nightshift.emulator.bodies import read_json
from nightshift.emulator.errors import ApiError
from nightshift.emulator.routes.deps import State
from nightshift.emulator.streams import anthropic_events

router = APIRouter()


@router.post("/v1/messages")
async def create_message(request: Request, state: State) -> Response:
    """Answer one Messages request (as server-sent events with ``stream: true``), or refuse it in
    Anthropic's error shape (before any event, with its status)."""
    body = await read_json(request, state)
    result = api.run(state, body, version=request.headers.get("anthropic-version"))
    if not result.ok:
        raise ApiError(result.status, result.body["type"], result.body["message"])
    if isinstance(body, dict) and body.get("stream"):
        return StreamingResponse(anthropic_events(result.body), media_type="text/event-stream")
    return JSONResponse(result.body)
