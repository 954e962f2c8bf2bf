"""API keys (rows of ``users``): only a key's sha256 hash and its short prefix are stored.

The transitions of a key are :func:`revoke_key` (active -> revoked) and :func:`mark_used`
(its last use moves forward); nothing else changes a key once it is made.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.orgs import ApiKey, key_prefix
from nightshift.ids import new_id
from nightshift.store.mapping import from_row, row_writer
from nightshift.store.tables import users

# Every column but the hash: nothing that reads a key for display ever holds it.
_SHOWN = [column for column in users.columns if column.name != "api_key_hash"]
_key_values = row_writer(ApiKey, users)


def hash_api_key(secret: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(secret.encode()).hexdigest()


async def create_key(
    conn: AsyncConnection, org_id: str, name: str, secret: str, *, now: datetime, is_admin: bool = False
) -> ApiKey:
    """A key of ``org_id`` for ``secret``, made at ``now`` (only its hash and prefix are stored)."""
    key = ApiKey(
        id=new_id("user"),
        organization_id=org_id,
        name=name,
        key_prefix=key_prefix(secret),
        is_admin=is_admin,
        created_at=now,
    )
    await conn.execute(insert(users).values(**_key_values(key), api_key_hash=hash_api_key(secret)))
    return key


async def key_for_secret(conn: AsyncConnection, secret: str) -> ApiKey | None:
    """The key whose secret is ``secret``, revoked or not, or None."""
    row = (await conn.execute(select(*_SHOWN).where(users.c.api_key_hash == hash_api_key(secret)))).first()
    return from_row(ApiKey, row) if row is not None else None


async def get_key(conn: AsyncConnection, key_id: str, *, org_id: str | None = None) -> ApiKey | None:
    """The key ``key_id`` (of ``org_id`` only, when given), or None."""
    query = select(*_SHOWN).where(users.c.id == key_id)
    if org_id is not None:
        query = query.where(users.c.organization_id == org_id)
    row = (await conn.execute(query)).first()
    return from_row(ApiKey, row) if row is not None else None


async def list_keys(conn: AsyncConnection, *, org_id: str | None = None) -> list[ApiKey]:
    """Every key (of ``org_id`` only, when given), oldest first, revoked ones included."""
    query = select(*_SHOWN).order_by(users.c.created_at, users.c.id)
    if org_id is not None:
        query = query.where(users.c.organization_id == org_id)
    return [from_row(ApiKey, row) for row in await conn.execute(query)]


async def revoke_key(conn: AsyncConnection, key_id: str, *, org_id: str | None = None, at: datetime) -> bool:
    """active -> revoked, for a key (of ``org_id`` only, when given).

    False when there is no such key or it was revoked already (it keeps its first revocation time).
    """
    query = update(users).where(users.c.id == key_id, users.c.revoked_at.is_(None))
    if org_id is not None:
        query = query.where(users.c.organization_id == org_id)
    result = await conn.execute(query.values(revoked_at=at))
    return result.rowcount > 0


async def mark_used(conn: AsyncConnection, key_id: str, *, at: datetime) -> None:
    """Record a use of the key at ``at``; a later use already recorded (by another process) stays."""
    await conn.execute(
        update(users)
        .where(users.c.id == key_id, (users.c.last_used_at.is_(None)) | (users.c.last_used_at < at))
        .values(last_used_at=at)
    )
