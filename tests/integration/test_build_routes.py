"""``api.app.build_routes``: ``serve`` prepares every route before it listens, so that no request
waits while FastAPI builds the routes of a router at its first request (0.24 s for all of ours).

FastAPI 0.165 builds an included router's routes when the first request is matched through it;
the test reads its routing's bookkeeping (``_IncludedRouter``) to see what is built, so that a
FastAPI that changes how it does this fails here instead of leaving ``build_routes`` quietly
doing nothing.

The apps of a process share their routes (``api_routes``): what one app built, the next finds
built.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute, _IncludedRouter

from nightshift.api.app import api_routes, build_routes, create_app
from nightshift.config import Settings


def built(app: FastAPI) -> tuple[int, int]:
    """Of the app's included routers (nested ones too), how many have their routes built, and how many there are."""
    ready, total = 0, 0
    branches = [r for r in app.router.routes if isinstance(r, _IncludedRouter)]
    while branches:
        branch = branches.pop()
        total += 1
        if branch._effective_candidates_version is not None:
            ready += 1
            branches.extend(c for c in branch.effective_candidates() if isinstance(c, _IncludedRouter))
    return ready, total


def route_names(app: FastAPI) -> set[str]:
    return {f"{sorted(r.methods or ())} {r.path}" for r in app.routes if isinstance(r, APIRoute)}


async def test_every_route_is_built_before_the_first_request(tmp_path: Path) -> None:
    api_routes.cache_clear()  # routes no app of this process has built yet
    lazy = create_app(Settings(home=tmp_path / "lazy"))
    ready, total = built(lazy)
    assert total > 10 and ready == 0  # FastAPI builds them at the first request: nothing yet

    app = create_app(Settings(home=tmp_path / "eager"))
    build_routes(app)
    assert built(app) == (total, total)
    assert route_names(app) == route_names(lazy)  # the same routes, only built earlier


async def test_a_built_app_answers_as_before(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", poller=False)
    app = create_app(settings)
    build_routes(app)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
            assert (await client.get("/v1/health")).status_code == 200
            assert (await client.get("/v1/agents/")).json() == []
            missing = await client.get("/v1/messages/batches/batch-nope")
            assert missing.status_code == 404


async def test_the_apps_of_a_process_share_the_routes_one_built(tmp_path: Path) -> None:
    api_routes.cache_clear()
    first = create_app(Settings(home=tmp_path / "first"))
    ready, total = built(first)
    assert ready == 0
    build_routes(first)

    second = create_app(Settings(home=tmp_path / "second"))
    assert built(second) == (total, total)
    assert route_names(second) == route_names(first)
