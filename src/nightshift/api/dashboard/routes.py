"""Serve the dashboard: ``/`` is the page, ``/dashboard/<file>`` its scripts, styles and icon.

Only the files shipped in ``static/`` are served (looked up by exact name, so no path can reach
outside it). Nothing is fetched from elsewhere: the Content-Security-Policy keeps the page to this
server.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from nightshift.errors import NotFound

router = APIRouter(tags=["dashboard"], include_in_schema=False)

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
HEADERS = {
    # Revalidate every time, so that an upgraded server serves its new page at once.
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


@cache
def _files() -> dict[str, bytes]:
    """The shipped static files by name, read once."""
    folder = resources.files("nightshift.api.dashboard") / "static"
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and any(entry.name.endswith(suffix) for suffix in MEDIA_TYPES)
    }


def _serve(name: str) -> Response:
    body = _files().get(name)
    if body is None:
        raise NotFound(f"no dashboard file named {name!r}")
    media_type = MEDIA_TYPES[name[name.rfind(".") :]]
    return Response(body, media_type=media_type, headers=HEADERS)


# Plain ``def`` handlers: FastAPI runs them in a thread, so the first read never blocks the loop.
@router.get("/")
def index() -> Response:
    """The dashboard page."""
    return _serve("index.html")


@router.get("/dashboard/{name}")
def asset(name: str) -> Response:
    """One of the page's scripts, styles or icons."""
    return _serve(name)
