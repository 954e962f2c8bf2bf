"""Liveness: the one route that never needs credentials."""

from __future__ import annotations

from fastapi import APIRouter

from nightshift import __version__

router = APIRouter(tags=["health"])


@router.get("/v1/health/")
@router.get("/v1/health", include_in_schema=False)
async def health() -> dict[str, str]:
    """The server is up; returns its version."""
    return {"status": "ok", "version": __version__}
