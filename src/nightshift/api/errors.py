"""Map nightshift's errors and FastAPI's validation errors to HTTP responses.

Every error body is an :class:`ErrorBody`: ``{"detail": "<what is wrong>", "field": ..., "errors":
[...]}``; a 422 says which field when it is known and lists every problem found. ``ERROR_RESPONSES``
declares that body in the OpenAPI description for the statuses the routes answer with. Nothing
here ever returns a stack trace: an unexpected error is a JSON 500 that points to the server log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from nightshift.api.input import UNSTORABLE, is_variant
from nightshift.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NightshiftError,
    NotFound,
    ProviderError,
    Unauthorized,
)

log = logging.getLogger(__name__)

STATUS = {NotFound: 404, Conflict: 409, InvalidInput: 422, Unauthorized: 401, Forbidden: 403, ProviderError: 502}


class ErrorBody(BaseModel):
    """The body of every error response."""

    detail: str = Field(description="What is wrong, for a person to read")
    field: str | None = Field(default=None, description="The request field at fault, when one is")
    errors: list[str] | None = Field(default=None, description="Every problem found (422 from validation only)")


_ERROR = {"model": ErrorBody}
# The error statuses of the secured routes (the same body for each), for the OpenAPI description.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {
        "description": "The HTTP server could not parse the request (a request line over about 64 KB, say): "
        "its own plain-text answer, before nightshift sees the request",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
    401: {**_ERROR, "description": "No credentials, or wrong ones (when the server has a password or keys)"},
    404: {**_ERROR, "description": "No such object (or it belongs to another organization)"},
    409: {**_ERROR, "description": "The request conflicts with the current state"},
    408: {**_ERROR, "description": "The request body did not arrive in time (NIGHTSHIFT_BODY_TIMEOUT_SECONDS)"},
    413: {**_ERROR, "description": "The request body is over the size limit, or holds too many JSON values"},
    422: {**_ERROR, "description": "Bad input; `field` names the part at fault"},
}
# The routes that manage API keys can also answer this.
FORBIDDEN_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {**_ERROR, "description": "The caller may not manage keys (it needs an admin key or the server password)"},
}
# The routes that only the server password may read (``GET /metrics``).
OPERATOR_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {**_ERROR, "description": "No password, or a wrong one (when the server has a password)"},
    403: {**_ERROR, "description": "An organization's API key: these figures cover every organization"},
}
# Routes that call a model provider can also answer this.
PROVIDER_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    502: {**_ERROR, "description": "The model provider failed or refused the request"},
}


class ErrorResponse(JSONResponse):
    """A JSON error body, ASCII-escaped so that any text an error quotes can be sent."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(
    status: int, detail: str, *, field: str | None = None, headers: Mapping[str, str] | None = None
) -> ErrorResponse:
    body: dict[str, object] = {"detail": detail}
    if field is not None:
        body["field"] = field
    return ErrorResponse(body, status_code=status, headers=headers)


def _status(error: NightshiftError) -> int:
    for kind, status in STATUS.items():
        if isinstance(error, kind):
            return status
    return 500


async def _nightshift_error(_request: Request, error: Exception) -> ErrorResponse:
    assert isinstance(error, NightshiftError)
    field = error.field if isinstance(error, InvalidInput) else None
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthorized) else None
    return _error(_status(error), error.message, field=field or None, headers=headers)


def _location(item: Any) -> str:
    parts = [str(p) for p in item.get("loc", ()) if p != "body" and not is_variant(p)]
    if item.get("type") == UNSTORABLE and item.get("ctx", {}).get("where"):
        parts.append(str(item["ctx"]["where"]))
    return ".".join(parts)


async def _validation_error(_request: Request, error: Exception) -> ErrorResponse:
    assert isinstance(error, RequestValidationError)
    items = list(error.errors())
    problems = [f"{_location(item) or 'body'}: {item.get('msg', 'invalid')}" for item in items]
    field = _location(items[0]) or None if items else None
    return ErrorResponse({"detail": "; ".join(problems), "field": field, "errors": problems}, status_code=422)


def _unparsable(error: StarletteHTTPException) -> str | None:
    """What is wrong with a body FastAPI could not decode (it says only "error parsing the body")."""
    cause = error.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return "the body is not valid UTF-8 JSON"
    if isinstance(cause, RecursionError):
        return "the body's JSON is nested too deeply"
    return None


async def _http_error(_request: Request, error: Exception) -> ErrorResponse:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 400 and (problem := _unparsable(error)) is not None:
        # Bad input like any other, so the same status as a body that is not JSON at all.
        return _error(422, problem, field="body")
    return _error(error.status_code, str(error.detail), headers=error.headers)


async def _integrity_error(_request: Request, error: Exception) -> ErrorResponse:
    # A uniqueness rule the checks before it could not see (a concurrent request won the race).
    # Only the first line of the database's message: the constraint, not the values (nor the statement).
    reason = str(getattr(error, "orig", None) or type(error).__name__).splitlines()[0]
    log.info("integrity error mapped to 409: %s", reason)
    return _error(409, "the request conflicts with data written at the same time; retry it")


async def _unexpected(_request: Request, error: Exception) -> ErrorResponse:
    log.exception("unexpected error", exc_info=error)
    return _error(500, "internal error; see the server log")


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(NightshiftError, _nightshift_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(IntegrityError, _integrity_error)
    app.add_exception_handler(Exception, _unexpected)
