"""The client's exceptions: one root, split by what went wrong.

``APIError`` and its subclasses are the server's answers with an error status, one class per
status a caller handles differently; ``ConnectionFailed`` and ``Timeout`` are the cases where no
answer came; ``InvalidRequestsFile`` is a requests file refused before anything is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class NightshiftClientError(Exception):
    """The root of every error the client raises; ``message`` is one line a person can act on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class APIError(NightshiftClientError):
    """The server answered with an error status.

    Attributes:
        status_code: The HTTP status.
        message: The server's ``detail`` (a validation error's field path made readable).
        body: The parsed JSON body, or the text when it was not JSON.
    """

    def __init__(self, message: str, *, status_code: int, body: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


class BadRequest(APIError):
    """400: the request could not be read."""


class AuthenticationError(APIError):
    """401: no credentials, or wrong ones."""


class PermissionDenied(APIError):
    """403: the credentials may not do this (managing keys needs an admin key)."""


class NotFound(APIError):
    """404: no such object in the caller's organization."""


class Conflict(APIError):
    """409: the request conflicts with the current state (an agent already in an open step)."""


class UnprocessableEntity(APIError):
    """422: bad input; the message names the field at fault."""


class RateLimited(APIError):
    """429: too many requests, still refused after the client's retries."""


class ServerError(APIError):
    """5xx: the server (or a provider behind it) failed."""


class ConnectionFailed(NightshiftClientError):
    """No answer: the server could not be reached, or the connection broke; names the address tried.

    Attributes:
        unreachable: No connection could be made at all (nothing listens there, or no answer to
            the connection): the server is down or the address is wrong.
    """

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class Timeout(NightshiftClientError):
    """The server did not answer in time, or a run did not end within ``wait``'s timeout."""


class InvalidRequestsFile(NightshiftClientError):
    """A requests file (JSON Lines) is malformed; the message names the file and the line."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: UnprocessableEntity,
    429: RateLimited,
}


def api_error(status_code: int, body: Any, *, reason: str = "") -> APIError:
    """The exception for an error answer: its class by status, its message from the body."""
    cls = _BY_STATUS.get(status_code) or (ServerError if status_code >= 500 else APIError)
    return cls(error_message(status_code, body, reason=reason), status_code=status_code, body=body)


def error_message(status_code: int, body: Any, *, reason: str = "") -> str:
    """The server's ``detail``; a list of validation errors as ``field.path: message; ...``."""
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str) and detail:
        return detail
    if isinstance(detail, list) and detail:
        problems = [
            f"{dotted(item.get('loc', ())) or 'body'}: {item.get('msg', 'invalid')}"
            if isinstance(item, dict)
            else str(item)
            for item in detail
        ]
        return "; ".join(problems)
    if detail is not None:
        return str(detail)
    if isinstance(body, str) and body.strip():
        return body.strip()[:300]
    return f"{status_code} {reason}".strip()


def dotted(loc: Sequence[Any]) -> str:
    """A pydantic error location as a person writes it: ``memory_blocks[0].value``.

    ``body`` (FastAPI's root) and a union variant's tag (``<message>``) are left out:
    ``messages[0].role``.
    """
    text = ""
    for part in loc:
        if part == "body" and not text:
            continue
        if isinstance(part, str) and part.startswith("<") and part.endswith(">"):
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
