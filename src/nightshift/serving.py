"""How uvicorn serves the API (the bounds on slow and idle connections), and running an ASGI app
with uvicorn in a background thread, for the demo and the tests.

uvicorn closes a connection left idle after a response (``timeout_keep_alive``), and answers 503
past ``limit_concurrency`` connections or requests at once, but sets no time for a request's head
to arrive: a connection that sends nothing, or its head a byte at a time, stays open for good,
and enough of them take every connection the process may have. :class:`BoundedHttpProtocol`
closes a connection whose request head is not complete in time.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from nightshift.config import Settings


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools), with a deadline for each request's head.

    The head (request line and headers) must be complete ``head_timeout`` seconds after the
    connection opened, or after the previous response ended (or after the last part of a body
    its answer did not wait for); otherwise the connection is closed. Once a head is complete
    the request runs as long as it needs (bodies are bounded by size, see
    ``api/body_limit.py``). Made per server by :func:`connection_options`.
    """

    head_timeout: ClassVar[float] = 10.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._head_deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._head_arrived()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        # The rest of a body whose answer has gone (a 401 from the headers alone, say) is read and
        # dropped as it comes. Each part gives the client the head's time again: it gets to read
        # the answer rather than a reset when its body takes longer than that, and one that stops
        # sending is closed all the same.
        if self._head_deadline is not None:
            self._await_head()
        super().on_body(body)

    def on_response_complete(self) -> None:
        # With a pipelined request queued, its head has arrived already.
        next_head_unread = not self.pipeline
        super().on_response_complete()
        if next_head_unread and not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._head_arrived()
        self._head_deadline = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def _head_arrived(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def connection_options(settings: Settings) -> dict[str, Any]:
    """The arguments of ``uvicorn.run`` that bound slow and idle connections and their number.

    ``NIGHTSHIFT_HEAD_TIMEOUT_SECONDS``: time for a request's head (a new connection's first too);
    ``NIGHTSHIFT_KEEP_ALIVE_SECONDS``: how long a connection may stay idle after a response;
    ``NIGHTSHIFT_MAX_CONNECTIONS``: connections (and requests in progress) at once, past which a
    request is answered 503.
    """
    protocol = type("NightshiftHttpProtocol", (BoundedHttpProtocol,), {"head_timeout": settings.head_timeout_seconds})
    return {
        "http": protocol,
        "timeout_keep_alive": settings.keep_alive_seconds,
        "limit_concurrency": settings.max_connections,
    }


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_server(app: Any, *, host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (``http://host:port``)."""
    port = port or free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"server on {host}:{port} failed to start")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"server on {host}:{port} did not start within 30 s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
