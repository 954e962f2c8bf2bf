"""The OpenAI Chat Completions API: ``POST /v1/chat/completions`` (base URL with ``/v1``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from nightshift.emulator import openai_api as api
from nightshift.emulator.bodies import read_json
from nightshift.emulator.routes.deps import State
from nightshift.emulator.streams import openai_chunks

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completion(request: Request, state: State) -> Response:
    """Answer one chat completion (as chunks with ``stream: true``), or refuse it with OpenAI's
    status and error body (before any chunk)."""
    body = await read_json(request, state)
    result = api.run(state, body)
    if result.ok and isinstance(body, dict) and body.get("stream"):
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return StreamingResponse(
            openai_chunks(result.body, include_usage=include_usage), media_type="text/event-stream"
        )
    return JSONResponse(result.body, status_code=result.status)
