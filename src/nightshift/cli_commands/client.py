"""The HTTP client of the client commands, their shared options, and how their errors are shown.

Every failure a person can act on becomes a ``CommandFailed`` with a one-line message; commands
run inside ``reported_errors()``, which prints that line on stderr and exits with code 1. The
client is sync on purpose: this is the CLI edge, one request at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from nightshift.api.input import is_variant
from nightshift.errors import NightshiftError

DEFAULT_SERVER = "http://127.0.0.1:8283"
PIPE_WIDTH = 160
PROGRESS_THRESHOLD = 10  # items of work below which no progress bar is worth drawing
API_KEY_NEEDED = "the server needs an API key: pass --api-key or set NIGHTSHIFT_API_KEY"

ServerOption = Annotated[
    str,
    typer.Option(
        "--server",
        envvar="NIGHTSHIFT_SERVER",
        help="Base URL of the nightshift server (env NIGHTSHIFT_SERVER).",
        show_envvar=False,
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="NIGHTSHIFT_API_KEY",
        help="API key or server password, sent as 'Authorization: Bearer' (env NIGHTSHIFT_API_KEY).",
        show_default=False,
        show_envvar=False,
    ),
]


class CommandFailed(NightshiftError):
    """A client command cannot go on; ``message`` is the one line shown to the user."""


class ServerRefused(CommandFailed):
    """The server answered with an error status; ``message`` is its ``detail``."""

    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


def stdout() -> Console:
    """A console on stdout (made per command, so it writes wherever stdout points now).

    Into a pipe or a file (and without COLUMNS) tables get 160 columns instead of rich's 80, so
    that ids and names stay whole.
    """
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def stderr() -> Console:
    """A console on stderr, for progress and notes that must not mix with the command's output."""
    return Console(stderr=True, highlight=False)


@contextmanager
def counting(label: str, total: int) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for ``total`` steps of work; yields the function that advances it.

    Shown only on a terminal, for work long enough to need it; elsewhere it prints nothing.
    """
    console = stderr()
    if total < PROGRESS_THRESHOLD or not console.is_terminal or console.is_dumb_terminal:
        yield lambda: None
        return
    progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), console=console, transient=True)
    with progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)


def plural(count: int, noun: str) -> str:
    """``1 agent``, ``3 agents``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn ``CommandFailed`` into its message on stderr and exit code 1 (never a traceback)."""
    try:
        yield
    except CommandFailed as error:
        # soft_wrap: the message stays one line even on a narrow or non-terminal console.
        stderr().print(error.message, style="red", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None


class ServerClient:
    """A small sync client of the nightshift API that turns every failure into ``CommandFailed``.

    Args:
        server: The server's base URL (``http://host:port``).
        api_key: Sent as ``Authorization: Bearer``; None sends no credentials.
        timeout: Seconds to wait for one answer.
    """

    def __init__(self, server: str, api_key: str | None, *, timeout: float = 60.0) -> None:
        self.base_url = server.rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise CommandFailed(f"--server must be a URL such as {DEFAULT_SERVER}, got {server!r}")
        self.api_key = api_key or None
        self.timeout = timeout
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("POST", path, json=body)

    def put(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("PUT", path, json=body)

    def patch(self, path: str) -> Any:
        return self.request("PATCH", path)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def request(
        self, method: str, path: str, *, json: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        """Send one request and return its JSON body.

        Raises:
            CommandFailed: the server cannot be reached, did not answer in time, or answered
                something that is not JSON.
            ServerRefused: the server answered with an error status (its ``detail`` is the message).
        """
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path, json=json, params=query)
        except httpx.ConnectError as error:
            raise CommandFailed(
                f"cannot reach the nightshift server at {self.base_url}: {_reason(error)}"
                " — start it with 'nightshift serve'"
            ) from None
        except httpx.TimeoutException:
            raise CommandFailed(
                f"the nightshift server at {self.base_url} did not answer within {self.timeout:g} s"
            ) from None
        except httpx.HTTPError as error:
            raise CommandFailed(f"cannot talk to the nightshift server at {self.base_url}: {error}") from None
        if response.status_code == 401:
            if self.api_key is None:
                raise ServerRefused(API_KEY_NEEDED, status_code=401)
            raise ServerRefused(f"the server refused the API key: {_detail(response)}", status_code=401)
        if response.is_error:
            detail = _detail(response)
            if response.status_code >= 500:
                detail = f"the server failed ({response.status_code}): {detail}"
            raise ServerRefused(detail, status_code=response.status_code)
        try:
            return response.json()
        except ValueError:
            raise CommandFailed(
                f"{self.base_url} answered {method} {path} with something that is not JSON: is it a nightshift server?"
            ) from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def dotted(loc: Sequence[Any]) -> str:
    """A pydantic error location as a person writes it: ``memory_blocks[0].value`` (a union
    variant's tag left out: ``messages[0].role``)."""
    text = ""
    for part in loc:
        if is_variant(part):
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _reason(error: httpx.ConnectError) -> str:
    text = str(error)
    if "refused" in text.lower():
        return "connection refused"
    return text or type(error).__name__


def _detail(response: httpx.Response) -> str:
    """The server's ``detail`` (nightshift's error bodies), or the start of whatever it sent."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or f"{response.status_code} {response.reason_phrase}"
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return detail
    if detail is not None:
        return str(detail)
    return f"{response.status_code} {response.reason_phrase}"
