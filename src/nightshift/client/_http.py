"""What the sync and the async client share: a request described once (``Call``), the retry
policy, and reading an answer into a model or an exception.

A resource method builds a ``Call`` (method, path, query, body, headers, and how to read the
answer); ``Client`` and ``AsyncClient`` only differ in how they send it and wait between tries.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from nightshift.client.errors import (
    ConnectionFailed,
    NightshiftClientError,
    Timeout,
    api_error,
)

T = TypeVar("T")

DEFAULT_SERVER = "http://127.0.0.1:8283"
SERVER_VARIABLE = "NIGHTSHIFT_SERVER"
API_KEY_VARIABLE = "NIGHTSHIFT_API_KEY"
# Answers worth another try: too many requests, or the server starting or draining.
RETRIED_STATUSES = frozenset({429, 503})
BACKOFF_BASE = 0.5  # seconds before the first retry (at most: the jitter draws below it)
BACKOFF_CAP = 8.0
RETRY_AFTER_CAP = 60.0  # a longer Retry-After is the server saying "not soon": raise instead


@dataclass(frozen=True, slots=True, kw_only=True)
class Call(Generic[T]):
    """One request and how to read its answer.

    ``retry_sent`` says whether the request may be sent again after a connection broke once it
    was sent: true for reads and for what the server makes idempotent (a create carrying an
    Idempotency-Key); a request that never left (connection refused) is always retried.
    """

    method: str
    path: str
    read: Callable[[Any], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    retry_sent: bool = True

    def query(self) -> dict[str, Any]:
        """The query without the parameters left unset."""
        return {k: v for k, v in self.params.items() if v is not None}


def base_url_of(base_url: str | None) -> str:
    """The base URL given, else ``NIGHTSHIFT_SERVER``, else the local default; without its last ``/``.

    Raises:
        ValueError: it is not an http(s) URL.
    """
    url = (base_url or os.environ.get(SERVER_VARIABLE) or DEFAULT_SERVER).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be a URL such as {DEFAULT_SERVER}, got {url!r}")
    return url


def api_key_of(api_key: str | None) -> str | None:
    """The API key given, else ``NIGHTSHIFT_API_KEY``; an empty one is none."""
    return (api_key if api_key is not None else os.environ.get(API_KEY_VARIABLE)) or None


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificate check of every client of this process, built once: httpx would read the CA
    bundle again for each client, which costs a command of the CLI more than its request."""
    return httpx.create_ssl_context()


def headers_of(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def backoff(attempt: int, rng: random.Random) -> float:
    """Seconds before retry number ``attempt`` (from 0): exponential, capped, with full jitter,
    so that clients refused together do not come back together."""
    return rng.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt))


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (a number, or an HTTP date), or None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def status_delay(response: httpx.Response, attempt: int, rng: random.Random) -> float | None:
    """How long to wait before sending again after ``response``, or None when it is final.

    A 429 or 503 is retried, after its Retry-After when it gives one (up to ``RETRY_AFTER_CAP``:
    past it the answer is final), else after the backoff.
    """
    if response.status_code not in RETRIED_STATUSES:
        return None
    asked = retry_after(response.headers.get("retry-after"))
    if asked is None:
        return backoff(attempt, rng)
    return asked if asked <= RETRY_AFTER_CAP else None


def transport_delay(error: httpx.TransportError, call: Call[Any], attempt: int, rng: random.Random) -> float | None:
    """How long to wait before sending again after ``error``, or None when it is final.

    A connection that was never made is always worth another try; one that broke after the
    request left only when the request is safe to repeat. A read timeout is final: the server
    got the request and is slow, and the caller set how long to wait.
    """
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
        return backoff(attempt, rng)
    if isinstance(error, httpx.TimeoutException):
        return None
    if call.retry_sent and isinstance(error, httpx.NetworkError | httpx.RemoteProtocolError):
        return backoff(attempt, rng)
    return None


def transport_error(
    base_url: str, error: httpx.TransportError, timeout: float, *, speaks_tls: bool
) -> NightshiftClientError:
    """The client's exception for a request that got no answer; names the address tried.

    ``speaks_tls``: whether a TLS handshake with the server succeeds (asked only when an
    ``http://`` URL met a server that broke the connection), so that the message can say which
    scheme to use.
    """
    if isinstance(error, httpx.TimeoutException) and not isinstance(error, httpx.ConnectTimeout):
        return Timeout(f"the nightshift server at {base_url} did not answer within {timeout:g} s")
    text = str(error)
    scheme = urlsplit(base_url).scheme
    if scheme == "https" and _tls_refused(text):
        return ConnectionFailed(f"the server at {base_url} speaks plain HTTP: use {_with_scheme(base_url, 'http')}")
    if scheme == "http" and speaks_tls:
        return ConnectionFailed(f"the server at {base_url} speaks HTTPS: use {_with_scheme(base_url, 'https')}")
    if isinstance(error, httpx.ConnectTimeout):
        return ConnectionFailed(
            f"cannot reach the nightshift server at {base_url}: no answer within {timeout:g} s", unreachable=True
        )
    if isinstance(error, httpx.ConnectError):
        reason = "connection refused" if "refused" in text.lower() else text or type(error).__name__
        return ConnectionFailed(f"cannot reach the nightshift server at {base_url}: {reason}", unreachable=True)
    return ConnectionFailed(
        f"the connection to the nightshift server at {base_url} broke: {text or type(error).__name__}"
    )


def may_speak_tls(base_url: str, error: httpx.TransportError) -> bool:
    """Whether to ask the server for a TLS handshake: an ``http://`` URL whose server dropped the
    connection or answered something that is not HTTP."""
    return urlsplit(base_url).scheme == "http" and isinstance(error, httpx.RemoteProtocolError | httpx.ReadError)


def speaks_tls(base_url: str, timeout: float = 2.0) -> bool:
    """Whether the server at ``base_url`` completes a TLS handshake (its certificate unchecked:
    this only tells which scheme it speaks)."""
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def _tls_refused(text: str) -> bool:
    lowered = text.lower()
    return any(
        sign in lowered
        for sign in (
            "wrong_version_number",
            "wrong version number",
            "record layer",
            "packet length too long",
            "http_request",
        )
    )


def _with_scheme(base_url: str, scheme: str) -> str:
    return urlunsplit(urlsplit(base_url)._replace(scheme=scheme))


def read_answer(call: Call[T], response: httpx.Response, base_url: str) -> T:
    """The answer read as ``call`` says, or the exception for an error status.

    Raises:
        APIError: (a subclass by status) the server answered with an error status.
        NightshiftClientError: the answer is not JSON (not a nightshift server?).
    """
    if response.is_error:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        raise api_error(response.status_code, body, reason=response.reason_phrase)
    try:
        body = response.json()
    except ValueError:
        raise NightshiftClientError(
            f"{base_url} answered {call.method} {call.path} with something that is not JSON: is it a nightshift server?"
        ) from None
    return call.read(body)
