"""Map nightshift's errors and FastAPI's validation errors to HTTP responses.

Every error body is ``{"detail": "<what is wrong>", ...}``; a 422 also says which field.
Nothing here ever returns a stack trace.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from nightshift.errors import Conflict, InvalidInput, NightshiftError, NotFound, ProviderError, Unauthorized

log = logging.getLogger(__name__)

STATUS = {NotFound: 404, Conflict: 409, InvalidInput: 422, Unauthorized: 401, ProviderError: 502}


def _status(error: NightshiftError) -> int:
    for kind, status in STATUS.items():
        if isinstance(error, kind):
            return status
    return 500


async def _nightshift_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, NightshiftError)
    body: dict[str, object] = {"detail": error.message}
    if isinstance(error, InvalidInput) and error.field:
        body["field"] = error.field
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthorized) else None
    return JSONResponse(body, status_code=_status(error), headers=headers)


async def _validation_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    problems = []
    for item in error.errors():
        location = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
        problems.append(f"{location or 'body'}: {item.get('msg', 'invalid')}")
    first = error.errors()[0] if error.errors() else {}
    field = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
    return JSONResponse({"detail": "; ".join(problems), "field": field, "errors": problems}, status_code=422)


async def _http_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)


async def _integrity_error(_request: Request, error: Exception) -> JSONResponse:
    # A uniqueness rule the checks before it could not see (a concurrent request won the race).
    log.info("integrity error mapped to 409: %s", error)
    return JSONResponse(
        {"detail": "the request conflicts with data written at the same time; retry it"}, status_code=409
    )


async def _unexpected(_request: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error", exc_info=error)
    return JSONResponse({"detail": "internal error; see the server log"}, status_code=500)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(NightshiftError, _nightshift_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(IntegrityError, _integrity_error)
    app.add_exception_handler(Exception, _unexpected)
