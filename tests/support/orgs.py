"""Who a test acts as on a shared server: an organization of its own, or the server's password."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.store.keys import create_key
from nightshift.store.orgs import get_or_create_org

# The password of the servers the e2e modules share (``tests/e2e/conftest.py``): a test that
# checks the password itself sends it; the others act in an organization of their own.
SERVER_PASSWORD = "e2e-password-0c9f"


async def new_organization_key(engine: AsyncEngine) -> str:
    """The secret of an admin key of a new organization (a unique name) in ``engine``'s database."""
    secret = "ns-" + secrets.token_urlsafe(32)
    async with engine.begin() as conn:
        org = await get_or_create_org(conn, f"test-{secrets.token_hex(6)}", datetime.now(UTC))
        await create_key(conn, org.id, "test-admin", secret, now=datetime.now(UTC), is_admin=True)
    return secret
