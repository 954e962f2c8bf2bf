"""What happens to every API request before its route: request id, injected HTTP faults, auth.

A pure ASGI middleware (it does not buffer streamed responses). Paths under ``/v1/messages`` are
Anthropic's, other ``/v1/`` paths OpenAI's, ``/v1beta/`` and ``/upload/v1beta/`` Gemini's;
``/_emulator/`` admin paths pass untouched. Gemini's key comes in ``x-goog-api-key`` (or the
``key`` query parameter); a resumable upload's chunks go to the upload URL the start of the
upload answered with, which is all they need, as with Google.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nightshift.emulator.config import HttpFault
from nightshift.emulator.errors import Api, ApiError, error_response, kind_for_status
from nightshift.emulator.state import EmulatorState


def api_of(path: str) -> Api | None:
    """Which API a path belongs to (None for the admin endpoints)."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith(("/v1beta/", "/upload/v1beta/")):
        return "gemini"
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
        query = scope.get("query_string", b"").decode("latin-1")
        refusal = _auth_error(api, headers, query, self.state.config.api_key)
        response = None
        if fault is not None:
            response = error_response(api, _fault_error(fault), request_id, _fault_headers(fault))
        elif refusal is not None:
            response = error_response(api, refusal, request_id)
        if response is not None:
            await _drain(receive)
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


# Google's words for a call without a key, and for a key it does not know.
_GEMINI_NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
_GEMINI_BAD_KEY = ApiError(
    400,
    "invalid_request_error",
    "API key not valid. Please pass a valid API key.",
    details=[
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"}
    ],
)


async def _drain(receive: Receive) -> None:
    """Read the request body we answer without, so the connection stays usable."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


def _auth_error(api: Api, headers: Mapping[str, str], query: str, expected: str | None) -> ApiError | None:
    """The refusal of a request without a key, or (when the emulator has one) with another key."""
    if api == "gemini":
        return _gemini_auth_error(headers, query, expected)
    bearer = headers.get("authorization", "")
    token = bearer[7:].strip() if bearer.lower().startswith("bearer ") else None
    key = headers.get("x-api-key") if api == "anthropic" else None
    given = key or token
    problem: str | None = None
    if not given:
        if api == "anthropic":
            problem = "x-api-key or Authorization: Bearer header is required"
        else:
            problem = "You didn't provide an API key. Provide it in an Authorization header (Bearer auth)."
    elif expected is not None and given != expected:
        problem = "invalid x-api-key" if api == "anthropic" else "Incorrect API key provided."
    return ApiError(401, "authentication_error", problem) if problem is not None else None


def _gemini_auth_error(headers: Mapping[str, str], query: str, expected: str | None) -> ApiError | None:
    parameters = parse_qs(query)
    if "upload_id" in parameters:
        return None
    given = headers.get("x-goog-api-key") or next(iter(parameters.get("key", [])), None)
    if not given:
        return ApiError(403, "permission_error", _GEMINI_NO_KEY)
    if expected is not None and given != expected:
        return _GEMINI_BAD_KEY
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
