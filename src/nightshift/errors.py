"""The one exception root, split by whose fault an error is. HTTP codes are mapped in ``api/`` only."""

from __future__ import annotations


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


class ProviderError(NightshiftError):
    """A model provider failed or refused; ``retryable`` says whether trying later may help."""

    def __init__(self, message: str, *, kind: str = "api_error", retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class ToolError(NightshiftError):
    """A tool failed while running; the model sees the message as the tool's result."""
