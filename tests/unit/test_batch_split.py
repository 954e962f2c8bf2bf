"""Cutting a step's requests into provider batches by count and by estimated size."""

from __future__ import annotations

import itertools

import pytest

from nightshift.domain.batch_split import (
    BYTES_PER_TOKEN,
    REQUEST_OVERHEAD_BYTES,
    estimated_request_bytes,
    split_by_size,
)


def test_requests_under_both_limits_make_one_batch() -> None:
    assert split_by_size([10, 20, 30], max_count=10, max_bytes=100) == [range(0, 3)]


def test_no_requests_make_no_batch() -> None:
    assert split_by_size([], max_count=10, max_bytes=100) == []


def test_the_count_limit_cuts_as_before() -> None:
    assert split_by_size([1] * 7, max_count=3, max_bytes=1_000) == [range(0, 3), range(3, 6), range(6, 7)]


def test_the_byte_limit_cuts_before_the_request_that_would_pass_it() -> None:
    # 40 + 40 = 80 fits in 100; a third 40 would make 120.
    assert split_by_size([40, 40, 40, 40, 40], max_count=10, max_bytes=100) == [
        range(0, 2),
        range(2, 4),
        range(4, 5),
    ]


def test_a_batch_may_reach_the_byte_limit_exactly() -> None:
    assert split_by_size([50, 50, 50, 50], max_count=10, max_bytes=100) == [range(0, 2), range(2, 4)]


def test_whichever_limit_comes_first_cuts() -> None:
    sizes = [10, 10, 10, 90, 10, 10]
    assert split_by_size(sizes, max_count=2, max_bytes=100) == [range(0, 2), range(2, 4), range(4, 6)]
    assert split_by_size(sizes, max_count=5, max_bytes=100) == [range(0, 3), range(3, 5), range(5, 6)]


def test_a_request_over_the_byte_limit_goes_alone() -> None:
    # Cut on both sides; the provider client judges it against the provider's own limit.
    assert split_by_size([10, 500, 10], max_count=10, max_bytes=100) == [range(0, 1), range(1, 2), range(2, 3)]
    assert split_by_size([500], max_count=10, max_bytes=100) == [range(0, 1)]


def test_every_request_is_in_exactly_one_batch_in_order_within_the_limits() -> None:
    sizes = [(i * 7919) % 97 + 1 for i in range(1_000)]
    slices = split_by_size(sizes, max_count=40, max_bytes=900)
    assert [i for s in slices for i in s] == list(range(1_000))
    assert all(len(s) <= 40 and sum(sizes[i] for i in s) <= 900 for s in slices)
    # As few as the limits allow: each batch but the last is full by one limit or the other.
    for s, following in itertools.pairwise(slices):
        assert len(s) == 40 or sum(sizes[i] for i in s) + sizes[following.start] > 900


def test_the_count_limit_must_admit_a_request() -> None:
    with pytest.raises(ValueError, match="max_count"):
        split_by_size([1], max_count=0, max_bytes=100)


def test_the_estimate_counts_tokens_overhead_and_new_images() -> None:
    assert estimated_request_bytes(0) == REQUEST_OVERHEAD_BYTES
    assert estimated_request_bytes(1_000) == REQUEST_OVERHEAD_BYTES + 1_000 * BYTES_PER_TOKEN
    assert estimated_request_bytes(1_000, image_bytes=300_000) == estimated_request_bytes(1_000) + 300_000
