"""A batch's request body written to a temporary file as it is built, and sent from there.

A provider batch may be hundreds of megabytes (Anthropic takes 256 MB per request body, OpenAI
200 MB per input file). Joined in memory it would be held once as the requests' pieces and once
whole, for as long as the upload lasts; spooled to a file, the process holds one request's bytes
at a time, and the body can be sent again (an SDK retry) by reading the file from the start.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from types import TracebackType
from typing import IO

from nightshift.errors import ProviderError
from nightshift.providers.errors import REQUEST_TOO_LARGE

# Read back this much at a time while sending.
CHUNK_BYTES = 1024 * 1024
# The file's write buffer (see ``SpooledBody.__init__``).
WRITE_BUFFER = 1024 * 1024


class SpooledBody:
    """Bytes written to an unnamed temporary file, sent as an HTTP body (``async for``), re-readable.

    Use as a context manager: the file is closed (and so deleted) when the block ends.
    """

    def __init__(self) -> None:
        # Written a request at a time (kilobytes each): a buffer of a megabyte makes that a system
        # call per megabyte, not per request.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="nightshift-batch-", buffering=WRITE_BUFFER)
        self.size = 0

    def write(self, data: bytes) -> None:
        """Append ``data`` to the body."""
        self._file.write(data)
        self.size += len(data)

    @property
    def closed(self) -> bool:
        """Whether the file is gone (the block has ended)."""
        return self._file.closed

    def check_size(self, limit: int, *, what: str) -> None:
        """Refuse, before anything is sent, a body over the provider's ``limit`` in bytes.

        Raises:
            ProviderError: ``request_too_large``, not retryable: the same requests will not fit later.
        """
        if self.size > limit:
            raise ProviderError(
                f"{what} holds {self.size:,} bytes, over the provider's limit of {limit:,}",
                kind=REQUEST_TOO_LARGE,
            )

    def as_file(self) -> IO[bytes]:
        """The body as a file at its start, everything written flushed (its size on disk is told
        from the file, and must be whole), for an SDK that uploads files."""
        self._file.flush()
        self._file.seek(0)
        return self._file

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # Reads of a file just written are served from the page cache: a memory copy, not I/O
        # worth a thread.
        self._file.flush()
        self._file.seek(0)
        while chunk := self._file.read(CHUNK_BYTES):
            yield chunk

    def __enter__(self) -> SpooledBody:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._file.close()
