"""The app's routes: each built once, where its router declares it, before any request; all but
the public few take the caller's organization and check what they would store.

FastAPI builds a route (its dependencies, its body's validators) when it is declared on a router.
An ``include_router`` with dependencies would build every route again, lazily, at the first request
matched through it, on the event loop of a server already answering: the app lists the routers'
routes as they are instead (``api_routes``), so a route of another kind here would be one FastAPI
still has to build.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Route

from nightshift.api.app import create_app
from nightshift.api.deps import organization
from nightshift.api.input import storable_body, storable_url
from nightshift.config import Settings

# The routes a caller reaches without an organization's key: liveness and readiness, the
# dashboard's page (its API calls carry the key), the metrics (the server password's own check)
# and the providers' webhooks (taken on their signatures).
PUBLIC = {
    "GET /v1/health",
    "GET /v1/health/",
    "GET /v1/ready",
    "GET /v1/ready/",
    "GET /",
    "GET /dashboard/{name}",
    "GET /metrics",
    "POST /v1/webhooks/openai",
}


def api(app: FastAPI) -> list[APIRoute]:
    return [route for route in app.router.routes if isinstance(route, APIRoute)]


def name(route: APIRoute) -> str:
    return f"{','.join(sorted(route.methods or ()))} {route.path}"


def test_every_route_is_built_where_it_is_declared(tmp_path: Path) -> None:
    app = create_app(Settings(home=tmp_path / "home"))
    # FastAPI's documentation routes (plain Starlette routes), then ours, each an APIRoute with its
    # dependencies resolved: nothing left for a first request to build.
    assert {type(route) for route in app.router.routes} == {Route, APIRoute}
    assert {route.path for route in app.router.routes if type(route) is Route} == {
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
    }
    routes = api(app)
    assert len(routes) > 80
    assert all(route.dependant.call is route.endpoint for route in routes)


def test_every_route_but_the_public_ones_takes_an_organization_and_checks_its_input(tmp_path: Path) -> None:
    routes = api(create_app(Settings(home=tmp_path / "home")))
    assert {name(route) for route in routes} >= PUBLIC
    for route in routes:
        calls = [dependency.call for dependency in route.dependant.dependencies]
        if name(route) in PUBLIC:
            assert organization not in calls, name(route)
            continue
        # The router's dependencies come first, before the route's own.
        assert calls[:3] == [organization, storable_url, storable_body], name(route)
        assert {401, 404, 422} <= set(route.responses), name(route)


def test_the_apps_of_a_process_share_their_routes(tmp_path: Path) -> None:
    first = create_app(Settings(home=tmp_path / "first"))
    second = create_app(Settings(home=tmp_path / "second"))
    assert all(a is b for a, b in zip(api(first), api(second), strict=True))


async def test_an_app_answers_through_its_routes(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", poller=False)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
            assert (await client.get("/v1/health")).status_code == 200
            assert (await client.get("/v1/agents/")).json() == []
            missing = await client.get("/v1/messages/batches/batch-nope")
            assert missing.status_code == 404
