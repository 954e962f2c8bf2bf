"""Liveness and readiness: the routes that never need credentials.

A process's readiness goes one way, set by the app's lifespan::

    starting -> ready -> draining
"""

from __future__ import annotations

from enum import StrEnum

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from nightshift import __version__

router = APIRouter(tags=["health"])


class Readiness(StrEnum):
    """Whether this process takes work (``GET /v1/ready``)."""

    STARTING = "starting"  # the lifespan has not finished starting (migrating, the sandbox): -> ready
    READY = "ready"  # serving, its poller claiming batch work: -> draining when it shuts down
    DRAINING = "draining"  # shutting down: no new batch work, its leases given back; final


class ReadinessPublic(BaseModel):
    """The answer of ``GET /v1/ready``."""

    status: Readiness


def set_readiness(app: FastAPI, readiness: Readiness) -> None:
    """Record the stage of the app's lifespan that ``GET /v1/ready`` reports."""
    app.state.readiness = readiness


@router.get("/v1/health/")
@router.get("/v1/health", include_in_schema=False)
async def health() -> dict[str, str]:
    """The server is up; returns its version."""
    return {"status": "ok", "version": __version__}


@router.get(
    "/v1/ready/",
    response_model=ReadinessPublic,
    responses={503: {"model": ReadinessPublic, "description": "starting, or draining (shutting down)"}},
)
@router.get("/v1/ready", include_in_schema=False)
async def ready(request: Request) -> JSONResponse:
    """200 while the server takes work; 503 while it starts and once it began shutting down."""
    readiness: Readiness = getattr(request.app.state, "readiness", Readiness.STARTING)
    status_code = 200 if readiness is Readiness.READY else 503
    return JSONResponse({"status": readiness.value}, status_code=status_code)
