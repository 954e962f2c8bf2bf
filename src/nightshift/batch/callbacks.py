"""Telling a run's ``callback_url`` that the run ended: POSTed once, retried with backoff.

A callback is a request the server makes on a caller's behalf, so it could reach what only the
server can (an admin API on loopback, a cloud metadata endpoint): URLs whose host is, or
resolves to, a loopback, private, link-local or otherwise special address are refused, when the
run is created and again before each attempt (the name may resolve elsewhere by then), unless
``NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE`` is set.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.domain.batches import BatchRun
from nightshift.errors import InvalidInput
from nightshift.store import runs as run_store

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BASE_DELAY = timedelta(seconds=2)
# While one process sends a callback, others leave it alone for this long.
SEND_CLAIM = timedelta(seconds=60)


async def check_callback_url(url: str, *, allow_private: bool) -> None:
    """Refuse a callback URL the server must not call on a caller's behalf.

    Raises:
        InvalidInput: not http(s), no host, a host that does not resolve, or one that is (or
            resolves to) a loopback, private, link-local, multicast or reserved address.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("callback_url must be an http or https URL with a host", field="callback_url")
    if allow_private:
        return
    host = parts.hostname
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            found = await asyncio.get_running_loop().getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise InvalidInput(f"callback_url's host {host!r} does not resolve: {exc}", field="callback_url") from exc
        addresses = {ipaddress.ip_address(info[4][0]) for info in found}
    for address in addresses:
        if not address.is_global or address.is_multicast:
            raise InvalidInput(
                f"callback_url's host {host!r} is {address}, a loopback, private or reserved address; the server "
                "does not call those (set NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE=true to allow them)",
                field="callback_url",
            )


def payload(run: BatchRun) -> dict[str, str | None]:
    """Letta's callback body."""
    return {
        "job_id": run.id,
        "status": run.status.value,
        "completed_at": run.completed_at.isoformat() if run.completed_at else None,
    }


async def send_due_callbacks(
    engine: AsyncEngine,
    http: httpx.AsyncClient,
    *,
    limit: int = 20,
    base_delay: timedelta = BASE_DELAY,
    allow_private: bool = False,
) -> int:
    """POST the callbacks of ended runs that are due; returns how many were attempted.

    A non-2xx answer or a network error is retried after ``base_delay`` (2 s by default), then
    twice, four and eight times as long; after the fifth failure the run keeps the last error in
    ``callback_error`` and nothing more is sent. A URL refused by :func:`check_callback_url` is
    not called at all.
    """
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        due = await run_store.callbacks_due(conn, now, limit=limit)
        claimed = [run for run in due if await run_store.claim_callback_attempt(conn, run, until=now + SEND_CLAIM)]
    for run in claimed:
        attempts = run.callback_attempts + 1
        assert run.callback_url is not None
        refused = False
        try:
            await check_callback_url(run.callback_url, allow_private=allow_private)
            response = await http.post(run.callback_url, json=payload(run), timeout=10)
            ok, code, error = response.is_success, response.status_code, None
            if not ok:
                error = f"callback answered HTTP {code}"
        except InvalidInput as exc:
            ok, code, error, refused = False, None, f"callback not sent: {exc.message}", True
        except httpx.HTTPError as exc:
            ok, code, error = False, None, f"callback failed: {type(exc).__name__}: {exc}"
        give_up = not ok and (refused or attempts >= MAX_ATTEMPTS)
        async with engine.begin() as conn:
            await run_store.record_callback(
                conn,
                run.id,
                attempts=attempts,
                sent_at=datetime.now(UTC) if ok or give_up else None,
                status_code=code,
                error=error,
                next_at=None if ok or give_up else datetime.now(UTC) + base_delay * 2 ** (attempts - 1),
            )
        if error:
            log.warning("run %s: %s (attempt %d)", run.id, error, attempts)
    return len(claimed)
