"""Telling a run's ``callback_url`` that the run ended: POSTed once, retried with backoff.

A callback is a request the server makes on a caller's behalf, so it could reach what only the
server can (an admin API on loopback, a cloud metadata endpoint): URLs whose host is, or
resolves to, a loopback, private, link-local or otherwise special address are refused, when the
run is created and again before each attempt (the name may resolve elsewhere by then), unless
``NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE`` is set. So are IPv6 addresses that carry such an IPv4
address for a translator or a tunnel to deliver to (NAT64, 6to4, Teredo, IPv4-mapped and
IPv4-compatible addresses).

Each attempt resolves the host once, checks every address it got, and connects to a checked
address itself (the request still names the URL's host, in its Host header and as the TLS server
name): a name that answers differently by the time of the connection cannot lead it elsewhere.
No proxy from the environment is used, since a proxy would make the connection in our place
(the certificate authorities of ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` still are).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.clock import SYSTEM_CLOCK, Clock
from nightshift.config import Settings
from nightshift.domain.batches import BatchRun
from nightshift.errors import InvalidInput
from nightshift.store import batch_runs as batch_run_store

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BASE_DELAY = timedelta(seconds=2)
# While one process sends a callback, others leave it alone for this long.
SEND_CLAIM = timedelta(seconds=60)
# How long one attempt may take, each address it tries.
TIMEOUT_SECONDS = 10.0

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# The addresses a host name resolves to, in the order to try them: (host, port) -> addresses.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: a local prefix of /48 to /96
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated by RFC 4291, still routed by some stacks
_LOW_32_BITS = 0xFFFFFFFF


@dataclass(frozen=True, slots=True, kw_only=True)
class CallbackRules:
    """Where and how often the server calls back, read once from the settings: what the check of
    a callback URL (when a run is created, and before each attempt) and the sending both go by."""

    # Whether callbacks may go to loopback and private addresses (NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE).
    allow_private: bool = False
    # The wait before a failed callback is sent again, doubled with each failure.
    retry_delay: timedelta = BASE_DELAY

    @classmethod
    def of(cls, settings: Settings) -> CallbackRules:
        return cls(
            allow_private=settings.callback_allow_private,
            retry_delay=timedelta(seconds=settings.callback_retry_seconds),
        )


async def resolve_host(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the system's resolver, in its order, each once."""
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


@dataclass(frozen=True, slots=True, kw_only=True)
class CallbackTarget:
    """A callback URL that passed the check, and the addresses it was checked at: the only ones
    a request to it connects to."""

    url: str
    addresses: tuple[Address, ...]


def _rfc6052_ipv4(address: ipaddress.IPv6Address, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address a NAT64 address of that prefix length carries (RFC 6052, section 2.2):
    right after the prefix, skipping bits 64 to 71."""
    value = int(address)
    without_u = ((value >> 64) << 56) | (value & ((1 << 56) - 1))  # 120 bits: bits 64-71 taken out
    start = prefix_length if prefix_length <= 64 else prefix_length - 8
    return ipaddress.IPv4Address((without_u >> (120 - start - 32)) & _LOW_32_BITS)


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[ipaddress.IPv4Address, str]]:
    """The IPv4 addresses an IPv6 address carries, which a translator or a tunnel would deliver
    to, each with what carries it."""
    found: list[tuple[ipaddress.IPv4Address, str]] = []
    if address.ipv4_mapped is not None:
        found.append((address.ipv4_mapped, "IPv4-mapped"))
    elif address in _IPV4_COMPATIBLE and int(address) > 1:
        found.append((ipaddress.IPv4Address(int(address) & _LOW_32_BITS), "IPv4-compatible"))
    if address in _NAT64:
        found.append((ipaddress.IPv4Address(int(address) & _LOW_32_BITS), "NAT64"))
    if address in _NAT64_LOCAL:
        # Where the IPv4 address sits depends on the prefix length the network chose: any of them.
        found += [(_rfc6052_ipv4(address, length), f"NAT64 /{length}") for length in (48, 56, 64, 96)]
    if address.sixtofour is not None:
        found.append((address.sixtofour, "6to4"))
    if address.teredo is not None:
        server, client = address.teredo
        found += [(server, "Teredo server"), (client, "Teredo client")]
    return found


def _special(address: Address) -> bool:
    return address.is_multicast or not address.is_global


def refusal(address: Address) -> str | None:
    """Why the server does not call ``address`` on a caller's behalf, or None."""
    if _special(address):
        return "a loopback, private or reserved address"
    if isinstance(address, ipaddress.IPv6Address):
        for carried, kind in embedded_ipv4(address):
            if _special(carried):
                return f"which carries {carried} ({kind}), a loopback, private or reserved address"
    return None


def _address(text: str) -> Address:
    # A link-local address from the resolver may name its interface ("fe80::1%eth0").
    return ipaddress.ip_address(text.split("%", 1)[0])


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def _resolved(host: str, port: int, resolve: Resolver) -> list[Address]:
    try:
        addresses = list(dict.fromkeys(_address(found) for found in await resolve(host, port)))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"callback_url's host {host!r} does not resolve: {exc}", field="callback_url") from exc
    if not addresses:
        raise InvalidInput(f"callback_url's host {host!r} does not resolve to any address", field="callback_url")
    return addresses


async def check_callback_url(url: str, *, allow_private: bool, resolve: Resolver = resolve_host) -> CallbackTarget:
    """Check a callback URL the server would call on a caller's behalf: its host is resolved once
    and every address it has is checked.

    Raises:
        InvalidInput: not http(s), no host, a host that does not resolve, or one that is (or
            resolves to) a loopback, private, link-local, multicast or reserved address, or to
            an IPv6 address that carries one.
    """
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if parts.scheme not in ("http", "https") or not parts.hostname or not port:
        raise InvalidInput("callback_url must be an http or https URL with a host", field="callback_url")
    host = parts.hostname
    addresses = [literal] if (literal := _literal(host)) is not None else await _resolved(host, port, resolve)
    if not allow_private:
        for address in addresses:
            reason = refusal(address)
            if reason is not None:
                raise InvalidInput(
                    f"callback_url's host {host!r} is {address}, {reason}; the server does not call those "
                    "(set NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE=true to allow them)",
                    field="callback_url",
                )
    return CallbackTarget(url=url, addresses=tuple(addresses))


@functools.cache
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """What httpx builds from ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` (the arguments: their values),
    or its own authorities; kept per value, since loading them takes a while."""
    return httpx.create_ssl_context(verify=True, trust_env=bool(cert_file or cert_dir))


async def post_callback(target: CallbackTarget, body: Mapping[str, Any]) -> httpx.Response:
    """POST ``body`` to the target, connecting to its checked addresses only (the first that
    accepts the connection), with no proxy and no redirect followed.

    Raises:
        httpx.HTTPError: no address could be reached, or the exchange failed.
    """
    url = httpx.URL(target.url)
    headers = {"Host": url.netloc.decode("ascii")}
    # The certificate is checked against the URL's host, sent as the TLS server name.
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    failure: httpx.TransportError | None = None
    tls = _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    # trust_env=False: no proxy (nor .netrc) from the environment.
    async with httpx.AsyncClient(verify=tls, trust_env=False, follow_redirects=False, timeout=TIMEOUT_SECONDS) as http:
        for address in target.addresses:
            pinned = url.copy_with(host=str(address))
            request = http.build_request("POST", pinned, json=body, headers=headers, extensions=extensions)
            try:
                return await http.send(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure = exc
    assert failure is not None  # a target has at least one address
    raise failure


def payload(run: BatchRun) -> dict[str, str | None]:
    """Letta's callback body."""
    return {
        "job_id": run.id,
        "status": run.status.value,
        "completed_at": run.completed_at.isoformat() if run.completed_at else None,
    }


async def send_due_callbacks(
    engine: AsyncEngine,
    rules: CallbackRules,
    *,
    clock: Clock = SYSTEM_CLOCK,
    limit: int = 20,
    resolve: Resolver = resolve_host,
) -> int:
    """POST the callbacks of ended runs that are due, side by side, and record how each went;
    returns how many were attempted (see ``claim_due_callbacks`` and ``send_callback``)."""
    claimed = await claim_due_callbacks(engine, clock=clock, limit=limit)
    # A failure to record one attempt (the database's) cuts none of the others short.
    outcomes = await asyncio.gather(
        *(send_callback(engine, rules, run, clock=clock, resolve=resolve) for run in claimed), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return len(claimed)


async def claim_due_callbacks(engine: AsyncEngine, *, clock: Clock = SYSTEM_CLOCK, limit: int = 20) -> list[BatchRun]:
    """Up to ``limit`` ended runs whose callback is due, each claimed for this process for
    ``SEND_CLAIM``: another leaves it alone meanwhile."""
    now = clock.now()
    async with engine.begin() as conn:
        due = await batch_run_store.callbacks_due(conn, now, limit=limit)
        return [run for run in due if await batch_run_store.claim_callback_attempt(conn, run, until=now + SEND_CLAIM)]


async def send_callback(
    engine: AsyncEngine,
    rules: CallbackRules,
    run: BatchRun,
    *,
    clock: Clock = SYSTEM_CLOCK,
    resolve: Resolver = resolve_host,
) -> None:
    """Send the callback of a run claimed by ``claim_due_callbacks`` once, and record how it went.

    A non-2xx answer or a network error is retried after ``rules.retry_delay``, then twice, four
    and eight times as long; after the fifth failure the run keeps the last error in
    ``callback_error`` and nothing more is sent. A URL refused by :func:`check_callback_url` is
    not called at all. ``resolve`` finds a host's addresses (the system's resolver by default).
    """
    attempts = run.callback_attempts + 1
    assert run.callback_url is not None
    refused = False
    try:
        target = await check_callback_url(run.callback_url, allow_private=rules.allow_private, resolve=resolve)
        response = await post_callback(target, payload(run))
        ok, code, error = response.is_success, response.status_code, None
        if not ok:
            error = f"callback answered HTTP {code}"
    except InvalidInput as exc:
        ok, code, error, refused = False, None, f"callback not sent: {exc.message}", True
    except httpx.HTTPError as exc:
        ok, code, error = False, None, f"callback failed: {type(exc).__name__}: {exc}"
    give_up = not ok and (refused or attempts >= MAX_ATTEMPTS)
    now = clock.now()
    async with engine.begin() as conn:
        await batch_run_store.record_callback(
            conn,
            run.id,
            attempts=attempts,
            sent_at=now if ok or give_up else None,
            status_code=code,
            error=error,
            next_at=None if ok or give_up else now + rules.retry_delay * 2 ** (attempts - 1),
        )
    if error:
        log.warning("run %s: %s (attempt %d)", run.id, error, attempts)
