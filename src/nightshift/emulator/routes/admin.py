"""Admin endpoints under ``/_emulator/`` for tests and demos (no auth).

* ``GET /_emulator/config``, ``POST /_emulator/config`` (fields given replace the current ones)
* ``POST /_emulator/script`` ``{"custom_id", "replies": [ScriptedReply...]}`` queues exact answers
* ``POST /_emulator/faults`` ``{"faults": [HttpFault...]}`` queues HTTP faults
* ``GET /_emulator/requests?path=&method=&limit=`` the API requests received, oldest first
* ``GET /_emulator/model_calls?custom_id=&batch_id=&api=&limit=`` what the model was asked
* ``POST /_emulator/reset`` back to the starting config and the machine's time, every batch, file
  and log forgotten
* ``POST /_emulator/clock`` ``{"advance": seconds}`` lets time pass at once for the batches and the
  prompt cache (what a test or ``make cost`` does instead of waiting an hour)
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from nightshift.emulator.config import HttpFault, ScriptedReply
from nightshift.emulator.routes.deps import State
from nightshift.emulator.state import NORMAL_SCRIPT_KEY

router = APIRouter(prefix="/_emulator")
M = TypeVar("M", bound=BaseModel)


class ScriptRequest(BaseModel):
    """Replies for one custom_id (``*`` or none: normal, non-batch calls)."""

    custom_id: str = NORMAL_SCRIPT_KEY
    replies: list[ScriptedReply]


class ClockRequest(BaseModel):
    """Seconds to let pass."""

    advance: float = Field(ge=0)


class FaultsRequest(BaseModel):
    """HTTP faults to queue."""

    faults: list[HttpFault]


async def _body(request: Request, model: type[M]) -> M | JSONResponse:
    """The request's JSON body as ``model``, or the 422 that says what is wrong with it."""
    try:
        return model.model_validate(await request.json())
    except ValidationError as error:
        return _invalid(error)


def _invalid(error: ValidationError) -> JSONResponse:
    return JSONResponse({"error": "invalid admin request", "detail": error.errors(include_url=False)}, 422)


@router.get("/health")
async def health() -> dict[str, bool]:
    """Whether the emulator answers."""
    return {"ok": True}


@router.get("/config")
async def get_config(state: State) -> dict[str, Any]:
    """The current config."""
    return state.config.model_dump(mode="json")


@router.post("/config", response_model=None)
async def set_config(request: Request, state: State) -> dict[str, Any] | JSONResponse:
    """Replace the fields given; answers the whole config."""
    try:
        return state.configure(await request.json()).model_dump(mode="json")
    except ValidationError as error:
        return _invalid(error)


@router.post("/script", response_model=None)
async def add_script(request: Request, state: State) -> dict[str, Any] | JSONResponse:
    """Queue exact replies for a custom_id."""
    script = await _body(request, ScriptRequest)
    if isinstance(script, JSONResponse):
        return script
    state.add_script(script.custom_id, script.replies)
    return {"custom_id": script.custom_id, "pending": len(state.scripts[script.custom_id])}


@router.post("/faults", response_model=None)
async def add_faults(request: Request, state: State) -> dict[str, Any] | JSONResponse:
    """Queue HTTP faults."""
    faults = await _body(request, FaultsRequest)
    if isinstance(faults, JSONResponse):
        return faults
    state.add_faults(faults.faults)
    return {"pending": sum(f.remaining for f in state.faults)}


@router.get("/requests")
async def requests(
    state: State,
    path: str | None = None,
    method: str | None = None,
    limit: int | None = None,
    since: float | None = None,
) -> dict[str, Any]:
    """The API requests received, oldest first (``since``: those received after that Unix time)."""
    data = [
        r
        for r in state.requests
        if (path is None or r["path"] == path)
        and (method is None or r["method"] == method.upper())
        and (since is None or r["received_at"] > since)
    ]
    return {"data": data[-limit:] if limit else data}


@router.get("/model_calls")
async def model_calls(
    state: State,
    custom_id: str | None = None,
    batch_id: str | None = None,
    api: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """What the model was asked, oldest first."""
    data = [
        c
        for c in state.model_calls
        if (custom_id is None or c["custom_id"] == custom_id)
        and (batch_id is None or c["batch_id"] == batch_id)
        and (api is None or c["api"] == api)
    ]
    return {"data": data[-limit:] if limit else data}


@router.post("/reset")
async def reset(state: State) -> dict[str, bool]:
    """Back to the starting config and the machine's time; every batch, file, log, script and fault forgotten."""
    state.reset()
    return {"ok": True}


@router.post("/clock", response_model=None)
async def advance_clock(request: Request, state: State) -> dict[str, float] | JSONResponse:
    """Let the time given pass; answers the emulator's time (Unix seconds)."""
    clock = await _body(request, ClockRequest)
    if isinstance(clock, JSONResponse):
        return clock
    return {"now": state.advance(clock.advance)}
