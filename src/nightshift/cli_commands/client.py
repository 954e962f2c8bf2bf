"""The client commands' view of the server, their shared options, and how their errors are shown.

The commands send through ``nightshift.client.Client`` (the project's one HTTP client), which
``ServerClient`` wraps: it hands back the JSON bodies the views render, and turns every
failure a person can act on into a ``CommandFailed`` with a one-line message; commands run inside
``reported_errors()``, which prints that line on stderr and exits with code 1. The client is
sync on purpose: this is the CLI edge, one request at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from nightshift.client import (
    DEFAULT_SERVER,
    APIError,
    AuthenticationError,
    Client,
    ConnectionFailed,
    NightshiftClientError,
    ServerError,
)
from nightshift.client.errors import dotted
from nightshift.errors import NightshiftError

__all__ = ["DEFAULT_SERVER", "ApiKeyOption", "CommandFailed", "ServerClient", "ServerOption", "ServerRefused", "dotted"]

# One retry (of a refused connection, a 429 or a 503): a person waits for the answer.
RETRIES = 1
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
    """The commands' client: ``nightshift.client.Client``'s requests, its failures as ``CommandFailed``.

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
        # "" rather than None: the option already read NIGHTSHIFT_API_KEY; no key means none.
        self.client = Client(self.base_url, self.api_key or "", timeout=timeout, max_retries=RETRIES)

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
        with failures_reported(self.api_key):
            return self.client.request(method, path, params=params, json=json)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextmanager
def failures_reported(api_key: str | None) -> Iterator[None]:
    """The client's exceptions as the commands' one-line ``CommandFailed`` and ``ServerRefused``."""
    try:
        yield
    except AuthenticationError as error:
        if api_key is None:
            raise ServerRefused(API_KEY_NEEDED, status_code=401) from None
        raise ServerRefused(f"the server refused the API key: {error.message}", status_code=401) from None
    except ServerError as error:
        raise ServerRefused(
            f"the server failed ({error.status_code}): {error.message}", status_code=error.status_code
        ) from None
    except APIError as error:
        raise ServerRefused(error.message, status_code=error.status_code) from None
    except ConnectionFailed as error:
        hint = " — start it with 'nightshift serve'" if error.unreachable else ""
        raise CommandFailed(f"{error.message}{hint}") from None
    except NightshiftClientError as error:
        raise CommandFailed(error.message) from None
