"""A batch body spooled to a file: sent in chunks, again from the start on a retry, refused past a limit."""

from __future__ import annotations

import pytest

from nightshift.errors import ProviderError
from nightshift.providers.spool import CHUNK_BYTES, SpooledBody


async def _read(body: SpooledBody) -> bytes:
    return b"".join([chunk async for chunk in body])


async def test_the_body_is_sent_whole_and_again_from_the_start() -> None:
    with SpooledBody() as body:
        for index in range(3):
            body.write(b"x" * CHUNK_BYTES + str(index).encode())
        sent = await _read(body)
        assert sent == await _read(body)  # an SDK retry sends the same bytes
        assert body.as_file().read() == sent  # an upload: the file, whole, from its start
    assert sent == b"".join(b"x" * CHUNK_BYTES + str(i).encode() for i in range(3))
    assert body.size == len(sent) == 3 * CHUNK_BYTES + 3


async def test_a_body_over_the_limit_is_refused_before_it_is_sent() -> None:
    with SpooledBody() as body:
        body.write(b"0123456789")
        body.check_size(10, what="the batch")
        with pytest.raises(ProviderError, match="the batch holds 10 bytes, over the provider's limit of 9") as refused:
            body.check_size(9, what="the batch")
    assert refused.value.kind == "request_too_large"
    assert not refused.value.retryable


def test_the_file_is_gone_when_the_block_ends() -> None:
    with SpooledBody() as body:
        body.write(b"{}")
    assert body.closed
