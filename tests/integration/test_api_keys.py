"""/v1/keys through HTTP on SQLite and PostgreSQL: who may manage keys, what a key shows, revocation."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from nightshift.api.app import create_app
from nightshift.api.deps import AppState
from nightshift.config import Settings
from nightshift.services.keys import KeyUsage
from nightshift.store.db import create_engine, opened
from nightshift.store.keys import create_key
from nightshift.store.orgs import get_or_create_org

PASSWORD = "keys-password-" + secrets.token_hex(8)
ACME_ADMIN = "ns-" + secrets.token_urlsafe(32)
ACME_USER = "ns-" + secrets.token_urlsafe(32)
BOLT_ADMIN = "ns-" + secrets.token_urlsafe(32)
FIELDS = {"id", "organization_id", "name", "prefix", "is_admin", "status", "created_at", "last_used_at", "revoked_at"}


class Recorder:
    """Every response, so a test can check where secrets appeared."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, response: httpx.Response) -> None:
        await response.aread()
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        self.seen.append((f"{response.request.method} {response.request.url.path}", f"{headers}\n{response.text}"))

    def holding(self, secret: str) -> list[str]:
        """The requests whose responses hold ``secret``."""
        return [request for request, body in self.seen if secret in body]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def _settings(tmp_path: Path, db_url: str, *, password: str | None = PASSWORD) -> Settings:
    return Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, server_password=password)


@pytest.fixture
async def ids(db_url: str) -> dict[str, str]:
    """acme with an admin key and a plain key, bolt with an admin key: their ids by secret."""
    async with opened(db_url) as engine, engine.begin() as conn:
        acme = await get_or_create_org(conn, "acme", datetime.now(UTC))
        bolt = await get_or_create_org(conn, "bolt", datetime.now(UTC))
        keys = {
            ACME_ADMIN: await create_key(conn, acme.id, "acme-ops", ACME_ADMIN, now=datetime.now(UTC), is_admin=True),
            ACME_USER: await create_key(conn, acme.id, "acme-ci", ACME_USER, now=datetime.now(UTC)),
            BOLT_ADMIN: await create_key(conn, bolt.id, "bolt-ops", BOLT_ADMIN, now=datetime.now(UTC), is_admin=True),
        }
    return {secret: key.id for secret, key in keys.items()} | {"acme": acme.id, "bolt": bolt.id}


@pytest.fixture
async def app(tmp_path: Path, db_url: str, ids: dict[str, str]) -> AsyncIterator[FastAPI]:
    application = create_app(_settings(tmp_path, db_url))
    async with application.router.lifespan_context(application):
        yield application


def http(app: FastAPI, recorder: Recorder, token: str | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://nightshift.test",
        headers={"authorization": f"Bearer {token}"} if token else {},
        event_hooks={"response": [recorder]},
    )


def state(app: FastAPI) -> AppState:
    found: AppState = app.state.nightshift
    return found


async def test_an_admin_key_manages_its_organizations_keys(
    app: FastAPI, recorder: Recorder, ids: dict[str, str]
) -> None:
    async with http(app, recorder, ACME_ADMIN) as admin:
        listed = await admin.get("/v1/keys/")
        assert listed.status_code == 200, listed.text
        assert [k["name"] for k in listed.json()] == ["acme-ops", "acme-ci"]  # acme's only, oldest first
        first = listed.json()[0]
        assert set(first) == FIELDS
        assert first["prefix"] == ACME_ADMIN[:11]
        assert (first["is_admin"], first["status"], first["revoked_at"]) == (True, "active", None)
        assert first["organization_id"] == ids["acme"]

        made = await admin.post("/v1/keys", json={"name": "nightly"})
        assert made.status_code == 200, made.text
        body = made.json()
        secret = body["key"]
        assert set(body) == FIELDS | {"key"}
        assert secret.startswith("ns-") and body["prefix"] == secret[:11]
        assert (body["name"], body["is_admin"], body["status"], body["organization_id"]) == (
            "nightly",
            False,
            "active",
            ids["acme"],
        )

        # The new key works, in acme, and its use is recorded.
        async with http(app, recorder, secret) as nightly:
            assert (await nightly.get("/v1/agents/")).status_code == 200
        await state(app).key_usage.settled()
        again = {k["id"]: k for k in (await admin.get("/v1/keys")).json()}
        assert set(again) == {ids[ACME_ADMIN], ids[ACME_USER], body["id"]}
        assert isinstance(datetime.fromisoformat(again[body["id"]]["last_used_at"]), datetime)
        assert again[ids[ACME_USER]]["last_used_at"] is None
        assert again[ids[ACME_ADMIN]]["last_used_at"] is not None  # this client's own calls

        # Revoked: refused at once; revoking again is harmless and keeps the first time.
        revoked = await admin.delete(f"/v1/keys/{body['id']}")
        assert revoked.status_code == 200, revoked.text
        assert (revoked.json()["status"], revoked.json()["id"]) == ("revoked", body["id"])
        assert "key" not in revoked.json()
        async with http(app, recorder, secret) as nightly:
            refused = await nightly.get("/v1/agents/")
            assert refused.status_code == 401
            assert refused.json()["detail"] == "this API key has been revoked"
        twice = await admin.delete(f"/v1/keys/{body['id']}")
        assert twice.status_code == 200
        assert twice.json() == revoked.json()

        # An admin key may make another admin key.
        second = await admin.post("/v1/keys/", json={"name": "deputy", "is_admin": True})
        assert second.status_code == 200 and second.json()["is_admin"] is True
        async with http(app, recorder, second.json()["key"]) as deputy:
            assert len((await deputy.get("/v1/keys/")).json()) == 4

    # Each secret appears in the response that made it, and nowhere else.
    assert recorder.holding(secret) == ["POST /v1/keys"]
    assert recorder.holding(second.json()["key"]) == ["POST /v1/keys/"]
    for existing in (ACME_ADMIN, ACME_USER, BOLT_ADMIN, PASSWORD):
        assert recorder.holding(existing) == []


async def test_non_admins_get_403(
    tmp_path: Path, db_url: str, app: FastAPI, recorder: Recorder, ids: dict[str, str]
) -> None:
    routes = [
        ("GET", "/v1/keys/", None),
        ("POST", "/v1/keys/", {"name": "x"}),
        ("DELETE", f"/v1/keys/{ids[ACME_USER]}", None),
    ]
    async with http(app, recorder, ACME_USER) as plain:
        for method, path, body in routes:
            response = await plain.request(method, path, json=body)
            assert response.status_code == 403, (method, path, response.text)
            assert response.json()["detail"] == (
                "managing API keys needs an admin key of the organization (nightshift keys create --admin)"
            )
    # Without a password, a caller without a key is nobody's admin.
    open_app = create_app(_settings(tmp_path, db_url, password=None))
    async with open_app.router.lifespan_context(open_app), http(open_app, recorder) as anonymous:
        for method, path, body in routes:
            response = await anonymous.request(method, path, json=body)
            assert response.status_code == 403, (method, path, response.text)
            assert "admin key or the server password" in response.json()["detail"]
        assert (await anonymous.get("/v1/agents/")).status_code == 200
    async with http(app, recorder) as nobody:
        assert (await nobody.get("/v1/keys/")).status_code == 401
    async with http(app, recorder, ACME_ADMIN) as admin:
        listed = (await admin.get("/v1/keys/")).json()
        assert [k["status"] for k in listed] == ["active", "active"]  # nothing was revoked or made


async def test_organizations_do_not_see_each_others_keys(app: FastAPI, recorder: Recorder, ids: dict[str, str]) -> None:
    async with http(app, recorder, BOLT_ADMIN) as bolt, http(app, recorder, PASSWORD) as password:
        assert [k["id"] for k in (await bolt.get("/v1/keys/")).json()] == [ids[BOLT_ADMIN]]
        for key_id in (ids[ACME_USER], ids[ACME_ADMIN], "user-nope"):
            response = await bolt.delete(f"/v1/keys/{key_id}")
            assert response.status_code == 404, response.text
            assert response.json()["detail"] == f"API key {key_id} not found"
        # The password holder manages the default organization's keys, and only those.
        assert (await password.get("/v1/keys")).json() == []
        assert (await password.delete(f"/v1/keys/{ids[ACME_USER]}")).status_code == 404
        made = await password.post("/v1/keys/", json={"name": "default-ops", "is_admin": True})
        assert made.status_code == 200, made.text
        assert [k["name"] for k in (await password.get("/v1/keys")).json()] == ["default-ops"]
        assert made.json()["id"] not in {k["id"] for k in (await bolt.get("/v1/keys/")).json()}
    # acme's keys are untouched.
    async with http(app, recorder, ACME_USER) as acme:
        assert (await acme.get("/v1/agents/")).status_code == 200


async def test_a_revocation_holds_at_once_in_every_process(
    tmp_path: Path, db_url: str, app: FastAPI, recorder: Recorder, ids: dict[str, str]
) -> None:
    other = create_app(_settings(tmp_path, db_url))
    async with other.router.lifespan_context(other), http(other, recorder, ACME_USER) as elsewhere:
        assert (await elsewhere.get("/v1/agents/")).status_code == 200
        async with http(app, recorder, ACME_ADMIN) as admin:
            assert (await admin.delete(f"/v1/keys/{ids[ACME_USER]}")).status_code == 200
        assert (await elsewhere.get("/v1/agents/")).status_code == 401


async def test_a_failed_last_use_write_is_logged_and_harmless(
    caplog: pytest.LogCaptureFixture, refused_port: int
) -> None:
    engine = create_engine(f"postgresql://postgres@127.0.0.1:{refused_port}/nowhere")
    try:
        usage = KeyUsage(engine)
        with caplog.at_level(logging.WARNING, logger="nightshift.services.keys"):
            usage.used("user-1")
            usage.used("user-1")  # within the minute: no second write
            await usage.settled()
            usage.used("user-1")  # the failed write is tried again at the next use
            await usage.settled()
    finally:
        await engine.dispose()
    warnings = [r.getMessage() for r in caplog.records if r.name == "nightshift.services.keys"]
    assert len(warnings) == 2
    assert warnings[0].startswith("could not record the last use of API key user-1 (")
