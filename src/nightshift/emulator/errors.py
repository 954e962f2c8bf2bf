"""Errors as each API writes them: status codes, bodies, and the exception routes raise.

Errors are named by Anthropic's types everywhere in the emulator; OpenAI bodies translate them
(``rate_limit_error`` is ``{"type": "requests", "code": "rate_limit_exceeded"}`` with status 429),
Gemini's are Google's (``{"error": {"code": 429, "message", "status": "RESOURCE_EXHAUSTED"}}``;
inside a batch, a request's error is a ``google.rpc.Status`` whose code is the RPC code, 8).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from fastapi.responses import JSONResponse

Api = Literal["anthropic", "openai", "gemini"]

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
# Google's status for each error type: HTTP status, canonical name, RPC code.
_GOOGLE: Final = {
    "invalid_request_error": (400, "INVALID_ARGUMENT", 3),
    "authentication_error": (401, "UNAUTHENTICATED", 16),
    "permission_error": (403, "PERMISSION_DENIED", 7),
    "not_found_error": (404, "NOT_FOUND", 5),
    "request_too_large": (400, "INVALID_ARGUMENT", 3),
    "rate_limit_error": (429, "RESOURCE_EXHAUSTED", 8),
    "api_error": (500, "INTERNAL", 13),
    "overloaded_error": (503, "UNAVAILABLE", 14),
    "timeout_error": (504, "DEADLINE_EXCEEDED", 4),
    "cancelled": (499, "CANCELLED", 1),
}
GEMINI_STATUS: Final = {kind: http for kind, (http, _, _) in _GOOGLE.items()}
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
    """A refusal a route answers with: HTTP status, Anthropic error type, message, OpenAI param and
    code, Google details."""

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        details: list[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.details = details
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
    table = {"anthropic": ANTHROPIC_STATUS, "openai": OPENAI_STATUS, "gemini": GEMINI_STATUS}[api]
    return table.get(kind, 500)


def anthropic_error(kind: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    """Anthropic's error body ``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


def openai_error(kind: str, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body ``{"error": {"message", "type", "param", "code"}}``; ``code`` overrides the kind's."""
    openai_type, kind_code = _OPENAI_SHAPE.get(kind, (kind, None))
    return {"error": {"message": message, "type": openai_type, "param": param, "code": code or kind_code}}


def google_error(
    kind: str, message: str, *, status: int | None = None, details: list[Any] | None = None
) -> dict[str, Any]:
    """Google's error body ``{"error": {"code", "message", "status"}}`` (``status``: another HTTP code)."""
    http, name, _ = _GOOGLE.get(kind, _GOOGLE["api_error"])
    error: dict[str, Any] = {"code": status or http, "message": message, "status": name}
    if details:
        error["details"] = details
    return {"error": error}


def rpc_status(kind: str, message: str) -> dict[str, Any]:
    """A ``google.rpc.Status`` (a batch request's error): the RPC code, not the HTTP one."""
    return {"code": _GOOGLE.get(kind, _GOOGLE["api_error"])[2], "message": message}


def rpc_code(status: str) -> int:
    """The RPC code of a Google status name (``RESOURCE_EXHAUSTED``: 8); 13 for a name it does not know."""
    return next((code for _, name, code in _GOOGLE.values() if name == status), 13)


def error_response(
    api: Api, error: ApiError, request_id: str | None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The HTTP response for an error, in the API's shape."""
    if api == "anthropic":
        body = anthropic_error(error.type, error.message, request_id)
    elif api == "gemini":
        body = google_error(error.type, error.message, status=error.status, details=error.details)
    else:
        body = openai_error(error.type, error.message, param=error.param, code=error.code)
    return JSONResponse(body, status_code=error.status, headers=dict(headers or {}))
