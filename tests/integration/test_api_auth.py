"""The server password, API keys and tenant isolation, through HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.store.db import opened
from nightshift.store.keys import create_key
from nightshift.store.orgs import get_or_create_org

MODEL = "anthropic/claude-3-5-haiku-20241022"
PASSWORD = "correct-horse-" + secrets.token_hex(8)
KEY_A = "ns-acme-" + secrets.token_urlsafe(24)
KEY_B = "ns-bolt-" + secrets.token_urlsafe(24)
SECRETS = (PASSWORD, KEY_A, KEY_B)

TOOL = '''
def lookup(term: str) -> str:
    """Look a term up in the glossary.

    Args:
        term: The term to look up.
    """
    return term.upper()
'''


class Recorder:
    """Every response a client saw, so a test can check that none of them leaks a secret."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, response: httpx.Response) -> None:
        await response.aread()
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        self.seen.append(f"{response.request.method} {response.request.url}\n{headers}\n{response.text}")

    def assert_no_secret(self) -> None:
        assert self.seen
        for body in self.seen:
            for secret in SECRETS:
                assert secret not in body, body


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


async def _add_keys(db_url: str) -> dict[str, str]:
    """Two organizations with one API key each; returns their organization ids by key."""
    async with opened(db_url) as engine:
        async with engine.begin() as conn:
            acme = await get_or_create_org(conn, "acme", datetime.now(UTC))
            await create_key(conn, acme.id, "alice", KEY_A, now=datetime.now(UTC))
            bolt = await get_or_create_org(conn, "bolt", datetime.now(UTC))
            await create_key(conn, bolt.id, "bob", KEY_B, now=datetime.now(UTC))
    return {KEY_A: acme.id, KEY_B: bolt.id}


@pytest.fixture
async def secured_app(tmp_path: Path, db_url: str) -> AsyncIterator[FastAPI]:
    """The app with a server password, its lifespan running, and two organizations' API keys."""
    settings = Settings(
        home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, server_password=PASSWORD
    )
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        await _add_keys(db_url)
        yield application


@pytest.fixture
async def open_app(tmp_path: Path, db_url: str) -> AsyncIterator[FastAPI]:
    """The app without a server password, with two organizations' API keys."""
    application = create_app(Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05))
    async with application.router.lifespan_context(application):
        await _add_keys(db_url)
        yield application


def http(app: FastAPI, recorder: Recorder, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://nightshift.test",
        headers=headers,
        event_hooks={"response": [recorder]},
    )


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# One route of each router, plus a few with ids and bodies: all need credentials.
SECURED: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/agents/", None),
    ("GET", "/v1/agents", None),
    ("POST", "/v1/agents/", {"name": "x", "model": MODEL}),
    ("GET", "/v1/agents/agent-nope", None),
    ("DELETE", "/v1/agents/agent-nope", None),
    ("GET", "/v1/agents/agent-nope/messages", None),
    ("GET", "/v1/tools/", None),
    ("POST", "/v1/tools/", {"source_code": TOOL}),
    ("PUT", "/v1/tools/", {"source_code": TOOL}),
    ("GET", "/v1/tools/tool-nope", None),
    ("POST", "/v1/tools/search", {"query": "lookup"}),
    ("POST", "/v1/agents/agent-nope/tools/lookup/run", {"args": {}}),
    ("GET", "/v1/blocks/", None),
    ("POST", "/v1/blocks/", {"label": "x", "value": "y"}),
    ("PATCH", "/v1/blocks/block-nope", {"value": "y"}),
]


async def test_without_credentials_only_health_and_ready_answer(secured_app: FastAPI, recorder: Recorder) -> None:
    async with http(secured_app, recorder) as client:
        for path in ("/v1/health", "/v1/health/"):
            health = await client.get(path)
            assert health.status_code == 200
            assert health.json()["status"] == "ok"
        for path in ("/v1/ready", "/v1/ready/"):
            ready = await client.get(path)
            assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        for method, path, body in SECURED:
            response = await client.request(method, path, json=body)
            assert response.status_code == 401, (method, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert "Authorization: Bearer" in response.json()["detail"]
        # Nothing was created by the refused requests.
        async with http(secured_app, recorder, **bearer(PASSWORD)) as admin:
            assert (await admin.get("/v1/agents/")).json() == []
            assert "lookup" not in {t["name"] for t in (await admin.get("/v1/tools/")).json()}
            assert (await admin.get("/v1/blocks/")).json() == []
    recorder.assert_no_secret()


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer not-the-password"},
        {"authorization": f"Bearer {PASSWORD}x"},
        {"authorization": f"Bearer {PASSWORD[:-1]}"},
        {"authorization": f"Basic {PASSWORD}"},
        {"authorization": "Bearer "},
        {"x-api-key": "not-a-key"},
    ],
    ids=["other", "longer", "shorter", "basic-scheme", "empty", "x-api-key"],
)
async def test_wrong_credentials_are_401(secured_app: FastAPI, recorder: Recorder, headers: dict[str, str]) -> None:
    async with http(secured_app, recorder, **headers) as client:
        assert (await client.get("/v1/health")).status_code == 200
        for method, path, body in SECURED:
            response = await client.request(method, path, json=body)
            assert response.status_code == 401, (method, path, response.text)
    recorder.assert_no_secret()


async def test_right_password_is_let_in(secured_app: FastAPI, recorder: Recorder) -> None:
    async with http(secured_app, recorder, **bearer(PASSWORD)) as client:
        for path in ("/v1/agents/", "/v1/tools/", "/v1/blocks/", "/v1/health"):
            response = await client.get(path)
            assert response.status_code == 200, (path, response.text)
        agent = await client.post("/v1/agents/", json={"name": "ada", "model": MODEL})
        assert agent.status_code == 200, agent.text
        assert (await client.get(f"/v1/agents/{agent.json()['id']}")).status_code == 200
        tool = await client.post("/v1/tools/", json={"source_code": TOOL})
        assert tool.status_code == 200, tool.text
        block = await client.post("/v1/blocks/", json={"label": "notes", "value": "hi"})
        assert block.status_code == 200, block.text
    # Letta's older clients send the key in X-API-Key.
    async with http(secured_app, recorder, **{"x-api-key": PASSWORD}) as client:
        assert [a["name"] for a in (await client.get("/v1/agents/")).json()] == ["ada"]
    recorder.assert_no_secret()


async def test_api_keys_are_let_in_and_scoped(secured_app: FastAPI, recorder: Recorder) -> None:
    async with (
        http(secured_app, recorder, **bearer(KEY_A)) as a,
        http(secured_app, recorder, **bearer(PASSWORD)) as admin,
    ):
        created = await a.post("/v1/agents/", json={"name": "acme-agent", "model": MODEL})
        assert created.status_code == 200, created.text
        assert [x["name"] for x in (await a.get("/v1/agents/")).json()] == ["acme-agent"]
        # The password maps to the default organization, which does not see acme's agent.
        assert (await admin.get("/v1/agents/")).json() == []
        assert (await admin.get(f"/v1/agents/{created.json()['id']}")).status_code == 404
    recorder.assert_no_secret()


async def test_metrics_take_the_password_and_no_api_key(secured_app: FastAPI, recorder: Recorder) -> None:
    async with http(secured_app, recorder, **bearer(PASSWORD)) as admin:
        # An organization's key does not read every organization's figures.
        async with http(secured_app, recorder, **bearer(KEY_A)) as a:
            refused = await a.get("/metrics")
            assert refused.status_code == 403, refused.text
            assert "server password" in refused.json()["detail"]
            assert "nightshift_" not in refused.text
        for headers in ({}, bearer("not-the-password"), {"authorization": f"Basic {PASSWORD}"}):
            async with http(secured_app, recorder, **headers) as client:
                response = await client.get("/metrics")
                assert response.status_code == 401, (headers, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
        allowed = await admin.get("/metrics")
        assert allowed.status_code == 200, allowed.text
        families = {family.name for family in text_string_to_metric_families(allowed.text)}
        assert {"nightshift_runs", "nightshift_provider_batches", "nightshift_poller_lag_seconds"} <= families
    recorder.assert_no_secret()


async def test_without_password_metrics_are_open(open_app: FastAPI, recorder: Recorder) -> None:
    async with http(open_app, recorder) as anonymous:
        response = await anonymous.get("/metrics")
        assert response.status_code == 200, response.text
        assert "nightshift_runs{" in response.text
    recorder.assert_no_secret()


async def seed(client: httpx.AsyncClient, tag: str) -> dict[str, Any]:
    """An agent with a tool and a shared block, all owned by the client's organization."""
    tool = await client.post("/v1/tools/", json={"source_code": TOOL})
    assert tool.status_code == 200, tool.text
    block = await client.post("/v1/blocks/", json={"label": "team", "value": f"{tag} ships on Fridays."})
    assert block.status_code == 200, block.text
    agent = await client.post(
        "/v1/agents/",
        json={
            "name": f"{tag}-agent",
            "model": MODEL,
            "memory_blocks": [{"label": "persona", "value": f"I work for {tag}."}],
            "block_ids": [block.json()["id"]],
            "tool_ids": [tool.json()["id"]],
        },
    )
    assert agent.status_code == 200, agent.text
    return {"tool": tool.json(), "block": block.json(), "agent": agent.json()}


async def test_organizations_cannot_see_or_touch_each_other(secured_app: FastAPI, recorder: Recorder) -> None:
    async with (
        http(secured_app, recorder, **bearer(KEY_A)) as a,
        http(secured_app, recorder, **bearer(KEY_B)) as b,
    ):
        theirs = await seed(a, "acme")
        ours = await seed(b, "bolt")
        agent_id, tool_id, block_id = theirs["agent"]["id"], theirs["tool"]["id"], theirs["block"]["id"]
        persona_id = next(x["id"] for x in theirs["agent"]["blocks"] if x["label"] == "persona")
        own_agent = ours["agent"]["id"]
        # Tool names are per organization: both have a 'lookup' tool.
        assert theirs["tool"]["name"] == ours["tool"]["name"] == "lookup"
        assert tool_id != ours["tool"]["id"]

        hidden: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", f"/v1/agents/{agent_id}", None),
            ("PATCH", f"/v1/agents/{agent_id}", {"name": "stolen"}),
            ("DELETE", f"/v1/agents/{agent_id}", None),
            ("GET", f"/v1/agents/{agent_id}/tools", None),
            ("POST", f"/v1/agents/{agent_id}/tools/send_message/run", {"args": {"message": "hi"}}),
            ("GET", f"/v1/agents/{agent_id}/messages", None),
            ("GET", f"/v1/agents/{agent_id}/core-memory/blocks", None),
            ("GET", f"/v1/agents/{agent_id}/core-memory/blocks/persona", None),
            ("PATCH", f"/v1/agents/{agent_id}/core-memory/blocks/persona", {"value": "stolen"}),
            ("PATCH", f"/v1/agents/{agent_id}/tools/attach/{ours['tool']['id']}", None),
            ("PATCH", f"/v1/agents/{agent_id}/tools/detach/{tool_id}", None),
            ("PATCH", f"/v1/agents/{agent_id}/core-memory/blocks/attach/{ours['block']['id']}", None),
            ("PATCH", f"/v1/agents/{agent_id}/core-memory/blocks/detach/{block_id}", None),
            ("GET", f"/v1/tools/{tool_id}", None),
            ("PATCH", f"/v1/tools/{tool_id}", {"description": "stolen"}),
            ("DELETE", f"/v1/tools/{tool_id}", None),
            ("GET", f"/v1/blocks/{block_id}", None),
            ("PATCH", f"/v1/blocks/{block_id}", {"value": "stolen"}),
            ("GET", f"/v1/blocks/{block_id}/agents", None),
            ("DELETE", f"/v1/blocks/{block_id}", None),
            ("GET", f"/v1/blocks/{persona_id}", None),
            ("DELETE", f"/v1/blocks/{persona_id}", None),
        ]
        for method, path, body in hidden:
            response = await b.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)

        # B cannot give its own agent A's tool or block.
        refused: list[tuple[str, str, dict[str, Any] | None]] = [
            ("PATCH", f"/v1/agents/{own_agent}/tools/attach/{tool_id}", None),
            ("PATCH", f"/v1/agents/{own_agent}/core-memory/blocks/attach/{block_id}", None),
            ("PATCH", f"/v1/agents/{own_agent}", {"tool_ids": [tool_id]}),
            ("PATCH", f"/v1/agents/{own_agent}", {"block_ids": [block_id]}),
            ("POST", "/v1/agents/", {"name": "x", "model": MODEL, "tool_ids": [tool_id]}),
            ("POST", "/v1/agents/", {"name": "x", "model": MODEL, "block_ids": [block_id]}),
        ]
        for method, path, body in refused:
            response = await b.request(method, path, json=body)
            assert response.status_code in (404, 422), (method, path, response.text)
            assert tool_id in response.json()["detail"] or block_id in response.json()["detail"]

        # Lists show only the caller's own objects.
        assert [x["id"] for x in (await b.get("/v1/agents/")).json()] == [own_agent]
        assert (await b.get("/v1/agents/", params={"name": "acme-agent"})).json() == []
        b_tools = (await b.get("/v1/tools/")).json()
        assert tool_id not in {t["id"] for t in b_tools}
        a_tools = {x["id"] for x in (await a.get("/v1/tools/")).json()}
        assert a_tools.isdisjoint(t["id"] for t in b_tools)
        assert [t["id"] for t in (await b.get("/v1/tools/", params={"name": "lookup"})).json()] == [ours["tool"]["id"]]
        b_blocks = {x["id"] for x in (await b.get("/v1/blocks/")).json()}
        assert block_id not in b_blocks and persona_id not in b_blocks
        assert {x["id"] for x in (await b.get("/v1/blocks/", params={"label": "team"})).json()} == {ours["block"]["id"]}
        own_agent_state = (await b.get(f"/v1/agents/{own_agent}")).json()
        assert tool_id not in {t["id"] for t in own_agent_state["tools"]}
        assert block_id not in {x["id"] for x in own_agent_state["blocks"]}

        # A's objects are exactly as A left them.
        after = (await a.get(f"/v1/agents/{agent_id}")).json()
        assert after["name"] == "acme-agent"
        assert [t["id"] for t in after["tools"] if t["name"] == "lookup"] == [tool_id]
        assert {x["id"]: x["value"] for x in after["blocks"]} == {
            persona_id: "I work for acme.",
            block_id: "acme ships on Fridays.",
        }
        assert (await a.get(f"/v1/tools/{tool_id}")).json() == theirs["tool"]
        assert (await a.get(f"/v1/blocks/{block_id}")).json()["value"] == "acme ships on Fridays."
        assert [x["id"] for x in (await a.get(f"/v1/blocks/{block_id}/agents")).json()] == [agent_id]
        assert [x["id"] for x in (await a.get("/v1/agents/")).json()] == [agent_id]
    recorder.assert_no_secret()


async def test_without_password_keys_still_scope_and_no_key_is_the_default_org(
    open_app: FastAPI, recorder: Recorder
) -> None:
    async with (
        http(open_app, recorder, **bearer(KEY_A)) as a,
        http(open_app, recorder) as anonymous,
        http(open_app, recorder, **bearer("ns-unknown-key")) as stranger,
    ):
        theirs = await seed(a, "acme")
        ours = await seed(anonymous, "default")
        assert [x["id"] for x in (await anonymous.get("/v1/agents/")).json()] == [ours["agent"]["id"]]
        assert (await anonymous.get(f"/v1/agents/{theirs['agent']['id']}")).status_code == 404
        assert (await anonymous.get(f"/v1/blocks/{theirs['block']['id']}")).status_code == 404
        assert (await anonymous.get(f"/v1/tools/{theirs['tool']['id']}")).status_code == 404
        assert [x["id"] for x in (await a.get("/v1/agents/")).json()] == [theirs["agent"]["id"]]
        # A key that is not known is refused rather than silently treated as the default organization.
        response = await stranger.get("/v1/agents/")
        assert response.status_code == 401
        assert "ns-unknown-key" not in response.text
    recorder.assert_no_secret()


async def test_stored_keys_are_hashed(secured_app: FastAPI, db_url: str) -> None:
    async with opened(db_url) as engine:
        async with engine.connect() as conn:
            rows = (await conn.execute(text("select * from users"))).mappings().all()
    assert len(rows) == 2
    hashes = {row["api_key_hash"] for row in rows}
    assert len(hashes) == 2
    for row in rows:
        for value in row.values():
            for key in (KEY_A, KEY_B):
                assert key not in str(value)
        assert len(row["api_key_hash"]) == 64
        int(row["api_key_hash"], 16)


async def test_openapi_and_health_do_not_leak_the_password(secured_app: FastAPI, recorder: Recorder) -> None:
    async with http(secured_app, recorder) as client:
        assert (await client.get("/v1/health")).status_code == 200
        schema = await client.get("/openapi.json")
        assert schema.status_code == 200
        assert "/v1/agents/" in schema.json()["paths"]
    recorder.assert_no_secret()
