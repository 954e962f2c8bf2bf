"""Organizations (their API keys are in ``store/keys.py``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.orgs import DEFAULT_ORG_ID, DEFAULT_ORG_NAME, Organization
from nightshift.ids import new_id
from nightshift.store.bulk import insert_ignoring_conflicts
from nightshift.store.tables import organizations


async def ensure_default_org(conn: AsyncConnection, now: datetime) -> None:
    """Create the organization that callers without an API key belong to, once (made at ``now``).

    Several server processes may start at once on a new database: the insert ignores a row
    that another process has just written.
    """
    values = {"id": DEFAULT_ORG_ID, "name": DEFAULT_ORG_NAME, "created_at": now}
    await conn.execute(insert_ignoring_conflicts(conn, organizations).values(**values))


async def get_or_create_org(conn: AsyncConnection, name: str, now: datetime) -> Organization:
    """The organization with this name, created (at ``now``) if missing."""
    found = await find_org(conn, name)
    if found is not None:
        return found
    org = Organization(id=new_id("org"), name=name, created_at=now)
    await conn.execute(insert(organizations).values(id=org.id, name=org.name, created_at=org.created_at))
    return org


async def find_org(conn: AsyncConnection, name: str) -> Organization | None:
    """The organization with this name, or None."""
    row = (await conn.execute(select(organizations).where(organizations.c.name == name))).first()
    return Organization(id=row.id, name=row.name, created_at=row.created_at) if row is not None else None


async def org_names(conn: AsyncConnection) -> dict[str, str]:
    """Every organization's name by its id."""
    return {row.id: row.name for row in await conn.execute(select(organizations.c.id, organizations.c.name))}
