"""Loopback addresses for tests of what the server does when a peer is not there or does not answer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections until the block ends: bound, never listening, so
    that no other test (or server) can take it meanwhile, as it could a port found free and let go."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


class Silent:
    """A loopback server that accepts connections and never answers (``silent_server``)."""

    def __init__(self) -> None:
        self.port = 0
        self.accepted = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def _hold(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        self.accepted.set()

    def hang_up(self) -> None:
        """Close every connection it holds: their requests fail at once."""
        for writer in self._writers:
            writer.close()


@asynccontextmanager
async def silent_server() -> AsyncIterator[Silent]:
    """A ``Silent`` server on this event loop until the block ends, when it hangs up."""
    silent = Silent()
    server = await asyncio.start_server(silent._hold, "127.0.0.1", 0)
    silent.port = server.sockets[0].getsockname()[1]
    try:
        yield silent
    finally:
        silent.hang_up()
        server.close()
        await server.wait_closed()
