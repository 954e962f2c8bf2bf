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
from nightshift.emulator.streams import IN_STREAM_ERRORS, anthropic_events, anthropic_failed_events

router = APIRouter()


@router.post("/v1/messages")
async def create_message(request: Request, state: State) -> Response:
    """Answer one Messages request (as server-sent events with ``stream: true``), or refuse it in
    Anthropic's error shape: with its status, or inside the stream (see ``streams``)."""
    body = await read_json(request, state)
    result = api.run(state, body, version=request.headers.get("anthropic-version"))
    streamed = isinstance(body, dict) and body.get("stream") is True
    if not result.ok and streamed and result.body["type"] in IN_STREAM_ERRORS:
        events = anthropic_failed_events(
            state.next_id("msg_"), str(body.get("model")), result.body["type"], result.body["message"]
        )
        return StreamingResponse(events, media_type="text/event-stream")
    if not result.ok:
        raise ApiError(result.status, result.body["type"], result.body["message"])
    if streamed:
        return StreamingResponse(anthropic_events(result.body), media_type="text/event-stream")
    return JSONResponse(result.body)
