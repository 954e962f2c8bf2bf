"""The provider error kind each HTTP status means, and how a failed connection is described.

The kinds themselves, and which are worth retrying (``is_retryable``), are in ``errors.py``,
beside ``ProviderError``.
"""

from __future__ import annotations

import os
from typing import Final, Protocol

from nightshift.errors import ProviderErrorKind

_BY_STATUS: Final = {
    400: ProviderErrorKind.INVALID_REQUEST,
    401: ProviderErrorKind.AUTHENTICATION,
    403: ProviderErrorKind.PERMISSION,
    404: ProviderErrorKind.NOT_FOUND,
    408: ProviderErrorKind.TIMEOUT,
    413: ProviderErrorKind.REQUEST_TOO_LARGE,
    422: ProviderErrorKind.INVALID_REQUEST,
    429: ProviderErrorKind.RATE_LIMIT,
    500: ProviderErrorKind.API_ERROR,
    502: ProviderErrorKind.OVERLOADED,
    503: ProviderErrorKind.OVERLOADED,
    504: ProviderErrorKind.TIMEOUT,
    529: ProviderErrorKind.OVERLOADED,
}


def kind_for_status(status: int) -> ProviderErrorKind:
    """The error kind an HTTP status code means (``api_error`` for any other 5xx or unknown code)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ProviderErrorKind.INVALID_REQUEST if 400 <= status < 500 else ProviderErrorKind.API_ERROR


def kind_of(error_type: object, status: int) -> ProviderErrorKind:
    """The kind of a provider's error: its own type when nightshift has a member for it, else
    what its HTTP status means (a type of the provider's that nightshift does not know, such as
    Anthropic's ``billing_error``, is kept in the error's message only)."""
    if isinstance(error_type, str):
        try:
            return ProviderErrorKind(error_type)
        except ValueError:
            pass
    return kind_for_status(status)


class _Request(Protocol):
    @property
    def url(self) -> object: ...


def unreachable(provider: str, request: _Request | None, exc: BaseException, *, timed_out: bool = False) -> str:
    """The message of a call that never got an answer: who, at which address, and why.

    ``cannot reach Anthropic at http://127.0.0.1:9/v1/messages/batches: connection refused``: the
    address is what a person checks first (a base URL variable pointing at the wrong place), so it
    is named whole, without its query string.
    """
    where = f" at {str(request.url).partition('?')[0]}" if request is not None else ""
    if timed_out:
        return f"{provider}{where} did not answer in time"
    return f"cannot reach {provider}{where}: {connection_reason(exc)}"


def connection_reason(exc: BaseException) -> str:
    """Why a connection failed, from the operating system's error deepest in the chain
    (``connection refused``, ``name or service not known``) rather than the SDK's
    ``Connection error.``."""
    seen: set[int] = set()
    found: BaseException | None = exc
    reason = ""
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        if isinstance(found, OSError) and isinstance(found.errno, int):
            # The number says it plainly; asyncio's own text is "Connect call failed (...)". A
            # resolver's error has a negative number and its text in strerror.
            reason = os.strerror(found.errno) if found.errno > 0 else (found.strerror or str(found))
        elif not reason and type(found).__module__.split(".")[0].startswith(("httpx", "httpcore")) and str(found):
            reason = str(found)
        found = found.__cause__ or found.__context__
    return (reason or str(exc) or type(exc).__name__).lower()
