"""Error kinds shared by every provider: names, which ones are worth retrying, HTTP status mapping.

The kinds are Anthropic's error types (``rate_limit_error``, ``overloaded_error``...), used for
OpenAI too so that the rest of nightshift handles one vocabulary.
"""

from __future__ import annotations

from typing import Final

INVALID_REQUEST: Final = "invalid_request_error"
AUTHENTICATION: Final = "authentication_error"
PERMISSION: Final = "permission_error"
NOT_FOUND: Final = "not_found_error"
REQUEST_TOO_LARGE: Final = "request_too_large"
RATE_LIMIT: Final = "rate_limit_error"
API_ERROR: Final = "api_error"
OVERLOADED: Final = "overloaded_error"
TIMEOUT: Final = "timeout_error"
CONNECTION: Final = "api_connection_error"

# Transient failures: the same request may succeed later.
RETRYABLE_KINDS: Final = frozenset({RATE_LIMIT, OVERLOADED, API_ERROR, TIMEOUT, CONNECTION})

_BY_STATUS: Final = {
    400: INVALID_REQUEST,
    401: AUTHENTICATION,
    403: PERMISSION,
    404: NOT_FOUND,
    408: TIMEOUT,
    413: REQUEST_TOO_LARGE,
    422: INVALID_REQUEST,
    429: RATE_LIMIT,
    500: API_ERROR,
    502: OVERLOADED,
    503: OVERLOADED,
    504: TIMEOUT,
    529: OVERLOADED,
}


def kind_for_status(status: int) -> str:
    """The error kind an HTTP status code means (``api_error`` for any other 5xx or unknown code)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return INVALID_REQUEST if 400 <= status < 500 else API_ERROR


def is_retryable(kind: str) -> bool:
    """Whether an error of this kind is transient (trying the same request later may succeed)."""
    return kind in RETRYABLE_KINDS
