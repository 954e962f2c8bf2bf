"""A created provider batch's submit, at most once (the rows of ``store/provider_batches.py``).

Its holder notes that it is about to call the provider before it does (``record_submit_intent``,
committed first): from then on the provider may hold the batch, and whoever submits it next
looks for it there first; copies found there are cancelled and recorded (``add_duplicates``). A
holder that cuts a batch into parts first locks it as still created (``hold_created``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, and_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batches import ProviderBatchStatus
from nightshift.store.tables import provider_batches


def _created_and_held(batch_id: str, owner: str) -> ColumnElement[bool]:
    return and_(
        provider_batches.c.id == batch_id,
        provider_batches.c.status == ProviderBatchStatus.CREATED.value,
        provider_batches.c.lease_owner == owner,
    )


async def record_submit_intent(conn: AsyncConnection, batch_id: str, owner: str, now: datetime) -> bool:
    """Note that ``owner`` is about to submit a created batch; False when it no longer may.

    Written (and committed) before the provider is called: from then on the provider may hold the
    batch, and whoever submits it next looks for it there first.
    """
    result = await conn.execute(
        update(provider_batches)
        .where(_created_and_held(batch_id, owner))
        .values(submit_started_at=now, submit_attempts=provider_batches.c.submit_attempts + 1)
    )
    return result.rowcount > 0


async def hold_created(conn: AsyncConnection, batch_id: str, owner: str, now: datetime) -> bool:
    """Whether ``owner`` still holds the batch, not yet submitted; its row stays locked until the
    transaction ends, so that it is not moved on (cancelled) while its items are cut into parts."""
    result = await conn.execute(
        update(provider_batches).where(_created_and_held(batch_id, owner)).values(updated_at=now)
    )
    return result.rowcount > 0


async def add_duplicates(conn: AsyncConnection, batch_id: str, duplicates: Sequence[str]) -> None:
    """Record provider ids of copies of this batch that were found and cancelled."""
    if not duplicates:
        return
    current = await conn.scalar(select(provider_batches.c.duplicates).where(provider_batches.c.id == batch_id))
    merged = list(dict.fromkeys([*(current or []), *duplicates]))
    await conn.execute(update(provider_batches).where(provider_batches.c.id == batch_id).values(duplicates=merged))
