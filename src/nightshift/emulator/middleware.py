"""What happens to every API request before its route: request id, injected HTTP faults, auth.

A pure ASGI middleware (it does not buffer streamed responses). Paths under ``/v1/messages`` are
Anthropic's, other ``/v1/`` paths OpenAI's; ``/_emulator/`` admin paths pass untouched.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nightshift.emulator.config import HttpFault
from nightshift.emulator.errors import Api, ApiError, error_response, kind_for_status
from nightshift.emulator.state import EmulatorState


def api_of(path: str) -> Api | None:
    """Which API a path belongs to (None for the admin endpoints)."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/"):
        return "openai"
    return None


class EmulatorMiddleware:
    """Adds ``request-id`` / ``x-request-id``, fails requests a fault matches, checks the API key."""

    def __init__(self, app: ASGIApp, state: EmulatorState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api = api_of(scope["path"]) if scope["type"] == "http" else None
        if api is None:
            await self.app(scope, receive, send)
            return
        request_id = self.state.next_id("req_")
        scope.setdefault("state", {})["request_id"] = request_id
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        fault = self.state.take_fault(scope["method"], scope["path"])
        problem = _auth_problem(api, headers, self.state.config.api_key)
        if fault is not None or problem is not None:
            await _drain(receive)
            if fault is not None:
                response = error_response(api, _fault_error(fault), request_id, _fault_headers(fault))
            else:
                response = error_response(api, ApiError(401, "authentication_error", str(problem)), request_id)
            response.headers[_id_header(api)] = request_id
            await response(scope, receive, send)
            return
        id_header = (_id_header(api).encode(), request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), id_header]}
            await send(message)

        await self.app(scope, receive, send_with_id)


def _id_header(api: Api) -> str:
    return "request-id" if api == "anthropic" else "x-request-id"


async def _drain(receive: Receive) -> None:
    """Read the request body we answer without, so the connection stays usable."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


def _auth_problem(api: Api, headers: Mapping[str, str], expected: str | None) -> str | None:
    bearer = headers.get("authorization", "")
    token = bearer[7:].strip() if bearer.lower().startswith("bearer ") else None
    key = headers.get("x-api-key") if api == "anthropic" else None
    given = key or token
    if not given:
        if api == "anthropic":
            return "x-api-key or Authorization: Bearer header is required"
        return "You didn't provide an API key. Provide it in an Authorization header (Bearer auth)."
    if expected is not None and given != expected:
        return "invalid x-api-key" if api == "anthropic" else "Incorrect API key provided."
    return None


def _fault_error(fault: HttpFault) -> ApiError:
    kind = kind_for_status(fault.status)
    return ApiError(fault.status, kind, fault.message or f"Injected fault: {kind} ({fault.status})")


def _fault_headers(fault: HttpFault) -> dict[str, str]:
    headers: dict[str, str] = {}
    if fault.should_retry is not None:
        headers["x-should-retry"] = "true" if fault.should_retry else "false"
    if fault.retry_after is not None:
        headers["retry-after"] = f"{fault.retry_after:g}"
    if fault.retry_after_ms is not None:
        headers["retry-after-ms"] = str(fault.retry_after_ms)
    return headers
