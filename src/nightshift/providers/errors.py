"""The provider error kind each HTTP status means.

The kinds themselves, and which are worth retrying (``is_retryable``), are in ``errors.py``,
beside ``ProviderError``.
"""

from __future__ import annotations

from typing import Final

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
