"""API keys: making, listing and revoking them, and recording when each was last used.

The CLI manages every organization's keys; over the API a caller manages its own
organization's keys only, and only with an admin key or the server password
(:func:`check_manages_keys`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.clock import SYSTEM_CLOCK, Clock
from nightshift.domain.orgs import KEY_SCHEME, ApiKey, Caller, CallerKind
from nightshift.errors import Forbidden, NotFound
from nightshift.store import keys as key_store

log = logging.getLogger(__name__)

# A key's last use is written at most this often per key and process: a request costs no write.
LAST_USED_RESOLUTION_SECONDS = 60.0


def new_secret() -> str:
    """A new API key: ``ns-`` and 256 random bits."""
    return KEY_SCHEME + secrets.token_urlsafe(32)


def check_manages_keys(caller: Caller) -> None:
    """Refuse (Forbidden) a caller that may not manage its organization's keys."""
    if caller.manages_keys:
        return
    if caller.kind is CallerKind.API_KEY:
        raise Forbidden("managing API keys needs an admin key of the organization (nightshift keys create --admin)")
    raise Forbidden("managing API keys needs an admin key or the server password (NIGHTSHIFT_SERVER_PASSWORD)")


async def create_key(
    conn: AsyncConnection, org_id: str, name: str, *, now: datetime, is_admin: bool = False
) -> tuple[ApiKey, str]:
    """A new key of ``org_id``, made at ``now``, and its secret: the only time the secret is known."""
    secret = new_secret()
    key = await key_store.create_key(conn, org_id, name, secret, now=now, is_admin=is_admin)
    return key, secret


async def list_keys(conn: AsyncConnection, *, org_id: str | None = None) -> list[ApiKey]:
    """Every key (of ``org_id`` only, when given), oldest first, revoked ones included."""
    return await key_store.list_keys(conn, org_id=org_id)


async def key_for_secret(engine: AsyncEngine, secret: str) -> ApiKey | None:
    """The key whose secret is ``secret``, revoked or not, or None.

    One statement on a connection of its own, outside a transaction: a request's credentials are
    checked before its transaction begins.
    """
    async with engine.connect() as conn:
        return await key_store.key_for_secret(conn, secret)


async def revoke_key(
    conn: AsyncConnection, key_id: str, *, now: datetime, org_id: str | None = None
) -> tuple[ApiKey, bool]:
    """Revoke a key (of ``org_id`` only, when given) at ``now``: the key as it is then, and whether this call
    revoked it.

    Revoking a revoked key changes nothing (it keeps the time it was first revoked). A key of
    another organization is NotFound, like one that does not exist.
    """
    revoked = await key_store.revoke_key(conn, key_id, org_id=org_id, at=now)
    key = await key_store.get_key(conn, key_id, org_id=org_id)
    if key is None:
        raise NotFound(f"API key {key_id} not found")
    return key, revoked


class Throttle:
    """Says, per key, whether a use is worth writing: the first one, then one per ``interval`` seconds.

    Pure apart from its memory: the clock is the caller's (``Clock.monotonic()``).
    """

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._written: dict[str, float] = {}

    def due(self, key_id: str, now: float) -> bool:
        """Whether a use at ``now`` should be written; if so, it counts as written from now on."""
        last = self._written.get(key_id)
        if last is not None and now - last < self._interval:
            return False
        self._written[key_id] = now
        return True

    def forget(self, key_id: str) -> None:
        """The write failed: the next use is written again."""
        self._written.pop(key_id, None)


class KeyUsage:
    """Records when each API key was last used, off the request's path.

    A use is written at most once per ``LAST_USED_RESOLUTION_SECONDS`` per key in this process,
    in a task of its own with its own transaction, so a request neither waits for the write nor
    fails with it (a failed write is logged and tried again at the key's next use).
    """

    def __init__(
        self, engine: AsyncEngine, *, interval: float = LAST_USED_RESOLUTION_SECONDS, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._throttle = Throttle(interval)
        self._pending: set[asyncio.Task[None]] = set()

    def used(self, key_id: str) -> None:
        """Note a use of the key now (the write, if one is due, happens in the background)."""
        if not self._throttle.due(key_id, self._clock.monotonic()):
            return
        task = asyncio.create_task(self._write(key_id, self._clock.now()), name=f"key-used-{key_id}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def settled(self) -> None:
        """Wait for the writes started so far (at shutdown, before the engine is closed)."""
        while self._pending:
            await asyncio.gather(*self._pending)

    async def _write(self, key_id: str, at: datetime) -> None:
        try:
            async with self._engine.begin() as conn:
                await key_store.mark_used(conn, key_id, at=at)
        except Exception as exc:  # a lost last-use time must never fail a request or the server
            self._throttle.forget(key_id)
            # The exception's type only: its text could quote the statement.
            log.warning("could not record the last use of API key %s (%s)", key_id, type(exc).__name__)
