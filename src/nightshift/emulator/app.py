"""The emulator's FastAPI app: the Anthropic, OpenAI, Gemini and admin routes over a state of its own.

Errors are answered in the shape of the API the path belongs to, never FastAPI's default bodies.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from nightshift.emulator.config import EmulatorConfig
from nightshift.emulator.errors import ApiError, error_response, kind_for_status
from nightshift.emulator.middleware import EmulatorMiddleware, api_of
from nightshift.emulator.routes import (
    admin,
    anthropic_batches,
    anthropic_messages,
    gemini,
    openai_batches,
    openai_chat,
    openai_files,
)
from nightshift.emulator.state import EmulatorState


def create_app(config: EmulatorConfig | None = None) -> FastAPI:
    """Build an emulator app with its own in-memory state.

    Args:
        config: The starting knobs (``POST /_emulator/reset`` returns to them); defaults otherwise.

    Returns:
        The app; its state is ``app.state.emulator``.
    """
    state = EmulatorState(config or EmulatorConfig())
    app = FastAPI(title="nightshift provider emulator", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.emulator = state  # what the routes get through ``routes.deps.State``
    app.include_router(anthropic_messages.router)
    app.include_router(anthropic_batches.router)
    app.include_router(openai_chat.router)
    app.include_router(openai_files.router)
    app.include_router(openai_batches.router)
    app.include_router(gemini.router)
    app.include_router(admin.router)
    app.add_middleware(EmulatorMiddleware, state=state)

    def respond(request: Request, error: ApiError) -> Response:
        api = api_of(request.url.path)
        if api is None:
            return JSONResponse({"error": error.type, "message": error.message}, status_code=error.status)
        return error_response(api, error, getattr(request.state, "request_id", None))

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> Response:
        return respond(request, error)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        kind = kind_for_status(error.status_code)
        message = "Not found" if error.status_code == 404 else str(error.detail)
        return respond(request, ApiError(error.status_code, kind, f"{message}: {request.method} {request.url.path}"))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return respond(request, ApiError(400, "invalid_request_error", problems))

    return app
