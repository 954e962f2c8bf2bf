"""Fixtures of the integration tests that several modules use."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI

from nightshift.store.keys import create_key
from nightshift.store.orgs import get_or_create_org


@pytest.fixture
async def other_org(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of another organization (its own API key); ``client`` is the default organization's."""
    key = "ns-other-" + secrets.token_urlsafe(24)
    async with app.state.nightshift.engine.begin() as conn:
        org = await get_or_create_org(conn, "other", datetime.now(UTC))
        await create_key(conn, org.id, "otto", key, now=datetime.now(UTC))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://nightshift.test",
        headers={"authorization": f"Bearer {key}"},
    ) as http:
        yield http
