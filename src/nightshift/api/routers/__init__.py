"""One router per resource.

A router of the API proper is made by ``secured``: each of its routes takes the caller's
organization (``deps.organization``) and checks what it would store (``input.storable_url`` and
``storable_body``) before its handler runs, and documents the error answers. FastAPI builds a
route once, where it is declared, with the dependencies of its router: the app lists these
routes as they are (``app.api_routes``), so every route is ready before the server listens and
none is built twice (an ``include_router`` with dependencies would build each again, lazily, at
the first request matched through it).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from nightshift.api.deps import organization
from nightshift.api.errors import ERROR_RESPONSES
from nightshift.api.input import storable_body, storable_url


def secured(tag: str, *, responses: dict[int | str, dict[str, Any]] | None = None) -> APIRouter:
    """A router whose routes need an organization's key (or the server password), tagged ``tag``
    in the OpenAPI description; ``responses`` are its routes' error answers beyond ``ERROR_RESPONSES``."""
    return APIRouter(
        tags=[tag],
        dependencies=[Depends(organization), Depends(storable_url), Depends(storable_body)],
        responses=ERROR_RESPONSES | (responses or {}),
    )
