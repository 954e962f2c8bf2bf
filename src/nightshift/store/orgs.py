"""Organizations and users (API keys are stored as sha256 hashes only)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.orgs import DEFAULT_ORG_ID, DEFAULT_ORG_NAME, Organization, User
from nightshift.ids import new_id
from nightshift.store.bulk import insert_ignoring_conflicts
from nightshift.store.tables import organizations, users


def hash_api_key(key: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(key.encode()).hexdigest()


async def ensure_default_org(conn: AsyncConnection) -> None:
    """Create the organization that callers without an API key belong to, once.

    Several server processes may start at once on a new database: the insert ignores a row
    that another process has just written.
    """
    values = {"id": DEFAULT_ORG_ID, "name": DEFAULT_ORG_NAME, "created_at": datetime.now(UTC)}
    await conn.execute(insert_ignoring_conflicts(conn, organizations).values(**values))


async def get_or_create_org(conn: AsyncConnection, name: str) -> Organization:
    """The organization with this name, created if missing."""
    row = (await conn.execute(select(organizations).where(organizations.c.name == name))).first()
    if row is not None:
        return Organization(id=row.id, name=row.name, created_at=row.created_at)
    org = Organization(id=new_id("org"), name=name, created_at=datetime.now(UTC))
    await conn.execute(insert(organizations).values(id=org.id, name=org.name, created_at=org.created_at))
    return org


async def create_user(conn: AsyncConnection, org_id: str, name: str, api_key: str) -> User:
    """A user of ``org_id`` holding ``api_key`` (only its hash is stored)."""
    user = User(id=new_id("user"), organization_id=org_id, name=name, created_at=datetime.now(UTC))
    await conn.execute(
        insert(users).values(
            id=user.id,
            organization_id=org_id,
            name=name,
            api_key_hash=hash_api_key(api_key),
            created_at=user.created_at,
        )
    )
    return user


async def org_for_api_key(conn: AsyncConnection, api_key: str) -> str | None:
    """The organization id of the user holding ``api_key``, or None."""
    result = await conn.scalar(select(users.c.organization_id).where(users.c.api_key_hash == hash_api_key(api_key)))
    return str(result) if result is not None else None
