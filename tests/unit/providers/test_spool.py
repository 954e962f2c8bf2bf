"""A batch body spooled to a file: sent in chunks, again from the start on a retry, refused past a
limit (with how to cut it when it holds several requests)."""

from __future__ import annotations

import pytest

from nightshift.domain.batch_split import split_by_size
from nightshift.errors import ProviderError
from nightshift.providers.spool import CHUNK_BYTES, BatchTooLarge, EncodedRequests, SpooledBody


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


def _body(requests: dict[str, bytes]) -> SpooledBody:
    """An Anthropic-like body: the requests, comma-separated, inside a wrapping of 15 bytes."""
    body = SpooledBody()
    body.write(b'{"requests":[')
    for index, (custom_id, data) in enumerate(requests.items()):
        if index:
            body.write_request(custom_id, b",")
        body.write_request(custom_id, data)
    body.write(b"]}")
    return body


def test_a_body_of_several_requests_over_the_limit_says_how_to_cut_it() -> None:
    requests = {"a": b"x" * 40, "b": b"y" * 40, "c": b"z" * 40}
    with _body(requests) as body:
        assert body.size == 15 + 120 + 2
        body.check_size(1000, what="the batch", split_above=137)
        with pytest.raises(BatchTooLarge, match="the batch holds 137 bytes, over the limit of 100") as refused:
            body.check_size(1000, what="the batch", split_above=100)  # ours, under the provider's
    assert refused.value.sizes == {"a": 40, "b": 41, "c": 41}  # with the separator before it
    assert refused.value.room == 100 - 15
    assert refused.value.kind == "request_too_large" and not refused.value.retryable
    cuts = split_by_size(list(refused.value.sizes.values()), max_count=3, max_bytes=refused.value.room)
    assert cuts == [range(0, 2), range(2, 3)]
    for cut in cuts:  # each part, written again, fits
        with _body({k: requests[k] for k in list(requests)[cut.start : cut.stop]}) as part:
            part.check_size(1000, what="the part", split_above=100)


def test_one_request_over_our_limit_goes_and_over_the_providers_is_refused() -> None:
    with _body({"a": b"x" * 200}) as body:
        body.check_size(1000, what="the batch", split_above=100)  # alone: the provider judges
        with pytest.raises(ProviderError, match="over the provider's limit of 200") as refused:
            body.check_size(200, what="the batch", split_above=100)
    assert not isinstance(refused.value, BatchTooLarge)
    assert refused.value.kind == "request_too_large"


def test_the_file_is_gone_when_the_block_ends() -> None:
    with SpooledBody() as body:
        body.write(b"{}")
    assert body.closed


def test_encoded_requests_come_back_as_added_and_a_part_reads_the_same_file() -> None:
    requests = EncodedRequests()
    for i in range(3):
        requests.add(f"agent-{i}", f'{{"n": {i}}}'.encode() * (i + 1))
    assert list(requests) == ["agent-0", "agent-1", "agent-2"]  # read while still in the write buffer
    assert requests["agent-1"] == b'{"n": 1}{"n": 1}'

    part = requests.part(["agent-2", "agent-0"])
    assert dict(part) == {"agent-2": b'{"n": 2}' * 3, "agent-0": b'{"n": 0}'}
    assert len(part) == 2 and len(requests) == 3
    with pytest.raises(KeyError):
        part["agent-1"]
