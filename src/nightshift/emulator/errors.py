"""Errors as each API writes them: status codes, bodies, and the exception routes raise.

Errors are named by Anthropic's types everywhere in the emulator; OpenAI bodies translate them
(``rate_limit_error`` is ``{"type": "requests", "code": "rate_limit_exceeded"}`` with status 429).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from fastapi.responses import JSONResponse

Api = Literal["anthropic", "openai"]

ANTHROPIC_STATUS: Final = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
OPENAI_STATUS: Final = {**ANTHROPIC_STATUS, "overloaded_error": 503}
_OPENAI_SHAPE: Final = {
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "rate_limit_error": ("requests", "rate_limit_exceeded"),
    "api_error": ("server_error", None),
    "overloaded_error": ("server_error", "server_overloaded"),
}
_BY_STATUS: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


class ApiError(Exception):
    """A refusal a route answers with: HTTP status, Anthropic error type, message, OpenAI param and code."""

    def __init__(
        self, status: int, type: str, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.param = param
        self.code = code


def invalid(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 ``invalid_request_error`` (``param`` and ``code`` show in OpenAI bodies only)."""
    return ApiError(400, "invalid_request_error", message, param=param, code=code)


def not_found(message: str) -> ApiError:
    """A 404 ``not_found_error``."""
    return ApiError(404, "not_found_error", message)


def kind_for_status(status: int) -> str:
    """The error type an HTTP status stands for."""
    return _BY_STATUS.get(status, "invalid_request_error" if status < 500 else "api_error")


def status_for(api: Api, kind: str) -> int:
    """The HTTP status an API answers an error type with."""
    table = ANTHROPIC_STATUS if api == "anthropic" else OPENAI_STATUS
    return table.get(kind, 500)


def anthropic_error(kind: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    """Anthropic's error body ``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


def openai_error(kind: str, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body ``{"error": {"message", "type", "param", "code"}}``; ``code`` overrides the kind's."""
    openai_type, kind_code = _OPENAI_SHAPE.get(kind, (kind, None))
    return {"error": {"message": message, "type": openai_type, "param": param, "code": code or kind_code}}


def error_response(
    api: Api, error: ApiError, request_id: str | None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The HTTP response for an error, in the API's shape."""
    if api == "anthropic":
        body = anthropic_error(error.type, error.message, request_id)
    else:
        body = openai_error(error.type, error.message, param=error.param, code=error.code)
    return JSONResponse(body, status_code=error.status, headers=dict(headers or {}))
