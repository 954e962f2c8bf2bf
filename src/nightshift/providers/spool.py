"""A batch's requests and body written to temporary files as they are built, and sent from there.

A provider batch may be hundreds of megabytes (Anthropic takes 256 MB per request body, OpenAI
200 MB per input file). Joined in memory it would be held once as the requests' pieces and once
whole, for as long as the upload lasts; spooled to a file, the process holds one request's bytes
at a time, and the body can be sent again (an SDK retry) by reading the file from the start.

Each request's bytes are counted as they are written, so that a body over the limit says how to
cut it (``BatchTooLarge``) without its requests being serialised again to be measured.

The requests themselves, each encoded for the provider as it is built, wait in a file too
(``EncodedRequests``): a request carries its tools' schemas whole, so a batch's encoded requests
weigh more than the objects they came from, which share one copy of each tool.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from types import TracebackType
from typing import IO

from nightshift.errors import ProviderError, ProviderErrorKind

# Read back this much at a time while sending.
CHUNK_BYTES = 1024 * 1024
# The file's write buffer (see ``SpooledBody.__init__``).
WRITE_BUFFER = 1024 * 1024


class BatchTooLarge(ProviderError):
    """A batch body over the limit that holds more than one request: cut it and send the parts.

    ``sizes`` are the bytes each request (by custom_id, in the body's order) takes in the body,
    its separator included; ``room`` is the most bytes of requests one body may hold (the limit
    less what wraps them), so that parts cut by ``domain.batch_split.split_by_size(sizes,
    max_bytes=room)`` each fit (a request over ``room`` on its own goes alone, judged then).
    """

    def __init__(self, message: str, *, sizes: Mapping[str, int], room: int) -> None:
        super().__init__(message, kind=ProviderErrorKind.REQUEST_TOO_LARGE)
        self.sizes = dict(sizes)
        self.room = room


class EncodedRequests(Mapping[str, bytes]):
    """A batch's encoded requests by custom_id, in the order added, kept in an unnamed temporary
    file and read back one at a time. The parts of a batch cut by size read the same file, which
    is closed once the batch's requests and every part of them are collected."""

    def __init__(
        self, *, within: EncodedRequests | None = None, where: dict[str, tuple[int, int]] | None = None
    ) -> None:
        if within is None:
            self._file: IO[bytes] = tempfile.TemporaryFile(prefix="nightshift-requests-", buffering=WRITE_BUFFER)
            weakref.finalize(self, self._file.close)
        else:
            self._file = within._file
        self._within = within  # a part keeps the whole alive, and so the file open
        self._where = where if where is not None else {}  # custom_id -> (offset, size) in the file
        self._end = 0

    def add(self, custom_id: str, entry: bytes) -> None:
        """Keep ``entry`` as the request of ``custom_id``."""
        self._file.write(entry)
        self._where[custom_id] = (self._end, len(entry))
        self._end += len(entry)

    def part(self, custom_ids: Iterable[str]) -> EncodedRequests:
        """The requests of ``custom_ids`` (in that order), from the same file; nothing is added to a part."""
        return EncodedRequests(within=self, where={custom_id: self._where[custom_id] for custom_id in custom_ids})

    def __getitem__(self, custom_id: str) -> bytes:
        offset, size = self._where[custom_id]
        self._file.flush()  # what was added last may still be in the write buffer
        return os.pread(self._file.fileno(), size, offset)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


class SpooledBody:
    """Bytes written to an unnamed temporary file, sent as an HTTP body (``async for``), re-readable.

    Use as a context manager: the file is closed (and so deleted) when the block ends.
    """

    def __init__(self) -> None:
        # Written a request at a time (kilobytes each): a buffer of a megabyte makes that a system
        # call per megabyte, not per request.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="nightshift-batch-", buffering=WRITE_BUFFER)
        self.size = 0
        self._requests: dict[str, int] = {}

    def write(self, data: bytes) -> None:
        """Append ``data`` (what wraps the requests) to the body."""
        self._file.write(data)
        self.size += len(data)

    def write_request(self, custom_id: str, data: bytes) -> None:
        """Append bytes of one request (its separator, its JSON: each call adds) to the body, their size noted."""
        self.write(data)
        self._requests[custom_id] = self._requests.get(custom_id, 0) + len(data)

    @property
    def closed(self) -> bool:
        """Whether the file is gone (the block has ended)."""
        return self._file.closed

    def check_size(self, limit: int, *, what: str, split_above: int | None = None) -> None:
        """Refuse, before anything is sent, a body over the provider's ``limit`` in bytes, or one
        of several requests over ``split_above`` (a lower limit of ours; by default ``limit``).

        Raises:
            BatchTooLarge: Over either limit with more than one request: the parts would fit.
            ProviderError: ``request_too_large``, not retryable: one request over the provider's
                limit, which will not fit later.
        """
        cut = min(limit, split_above or limit)
        if self.size > cut and len(self._requests) > 1:
            wrapping = self.size - sum(self._requests.values())
            raise BatchTooLarge(
                f"{what} holds {self.size:,} bytes, over the limit of {cut:,}: to be cut into parts",
                sizes=self._requests,
                room=cut - wrapping,
            )
        if self.size > limit:
            raise ProviderError(
                f"{what} holds {self.size:,} bytes, over the provider's limit of {limit:,}",
                kind=ProviderErrorKind.REQUEST_TOO_LARGE,
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
