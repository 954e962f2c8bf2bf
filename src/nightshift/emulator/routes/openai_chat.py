"""The OpenAI Chat Completions API: ``POST /v1/chat/completions`` (base URL with ``/v1``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from nightshift.emulator import openai_api as api
from nightshift.emulator.bodies import read_json
from nightshift.emulator.routes.deps import State

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completion(request: Request, state: State) -> JSONResponse:
    """Answer one chat completion, or refuse it with OpenAI's status and error body."""
    body = await read_json(request, state)
    result = api.run(state, body)
    return JSONResponse(result.body, status_code=result.status)
