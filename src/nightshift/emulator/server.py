"""Running the emulator: ``serve`` for the CLI (blocking), ``running_emulator`` for tests and demos.

``running_emulator`` starts uvicorn in a background thread on a free loopback port and stops it
on exit. Point the SDKs at it with ``ANTHROPIC_BASE_URL=<url>`` and ``OPENAI_BASE_URL=<url>/v1``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from nightshift.emulator.app import create_app
from nightshift.emulator.config import EmulatorConfig

DEFAULT_PORT = 8765
_START_TIMEOUT = 10.0


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, config: EmulatorConfig | None = None) -> None:
    """Serve the emulator until interrupted (what ``nightshift emulator`` runs).

    Args:
        host: Interface to listen on.
        port: Port to listen on.
        config: Starting knobs; the defaults otherwise.
    """
    uvicorn.run(create_app(config), host=host, port=port, log_level="info")


@contextmanager
def running_emulator(config: EmulatorConfig | None = None, *, host: str = "127.0.0.1") -> Iterator[str]:
    """Run an emulator in a background thread for the duration of the block.

    Args:
        config: Starting knobs; the defaults otherwise.
        host: Loopback interface to listen on.

    Yields:
        The base URL, e.g. ``http://127.0.0.1:54321`` (Anthropic's and Gemini's base URL; OpenAI's
        is this plus ``/v1``).

    Raises:
        RuntimeError: The server did not start within ten seconds.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"emulator-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + _START_TIMEOUT
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the emulator did not start on {host}:{port}")
            time.sleep(0.005)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=_START_TIMEOUT)
        sock.close()
