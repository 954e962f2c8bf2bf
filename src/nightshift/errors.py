"""The one exception root, split by whose fault an error is. HTTP codes are mapped in ``api/`` only."""

from __future__ import annotations

from enum import StrEnum


class NightshiftError(Exception):
    """Base of every error nightshift raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(NightshiftError):
    """The object does not exist, or belongs to another organization."""


class Conflict(NightshiftError):
    """The request clashes with the current state (a duplicate name, an agent already stepping)."""


class InvalidInput(NightshiftError):
    """The caller sent something that cannot be used; ``field`` names the part when known."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Unauthorized(NightshiftError):
    """Missing or wrong credentials."""


class Forbidden(NightshiftError):
    """Right credentials, but not for this (an organization's API key asking for every organization's
    figures, a key that is not an admin managing keys): the message says what is needed."""


class DatabaseUnavailable(NightshiftError):
    """The database cannot be reached or opened; the message says what to check or run."""


class ProviderErrorKind(StrEnum):
    """What kind of failure a provider call met: Anthropic's error types, used for OpenAI too so
    that the rest of nightshift handles one vocabulary (``providers/errors.py`` says which are
    transient and maps HTTP statuses to them)."""

    INVALID_REQUEST = "invalid_request_error"  # the request is malformed or refused as it is
    AUTHENTICATION = "authentication_error"  # no key, or a wrong one
    PERMISSION = "permission_error"  # the key may not do this
    NOT_FOUND = "not_found_error"  # the batch or model is unknown to the provider
    REQUEST_TOO_LARGE = "request_too_large"  # the body is over the provider's size limit
    RATE_LIMIT = "rate_limit_error"  # too many requests or tokens for now (transient)
    API_ERROR = "api_error"  # the provider failed on its side (transient)
    OVERLOADED = "overloaded_error"  # the provider is overloaded (transient)
    TIMEOUT = "timeout_error"  # no answer in time (transient)
    CONNECTION = "api_connection_error"  # the provider could not be reached (transient)


# Transient failures: the same request may succeed later.
RETRYABLE_KINDS = frozenset(
    {
        ProviderErrorKind.RATE_LIMIT,
        ProviderErrorKind.OVERLOADED,
        ProviderErrorKind.API_ERROR,
        ProviderErrorKind.TIMEOUT,
        ProviderErrorKind.CONNECTION,
    }
)


def is_retryable(kind: str) -> bool:
    """Whether an error of this kind is transient (trying the same request later may succeed).

    ``kind`` is a ``ProviderErrorKind`` or the type a provider gave a failed request of a batch
    (``ModelError.type``, its own word, which may be one nightshift has no member for).
    """
    return kind in RETRYABLE_KINDS


class ProviderError(NightshiftError):
    """A model provider failed or refused; ``retryable`` says whether trying later may help."""

    def __init__(
        self, message: str, *, kind: ProviderErrorKind = ProviderErrorKind.API_ERROR, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class ToolError(NightshiftError):
    """A tool failed while running; the model sees the message as the tool's result."""
