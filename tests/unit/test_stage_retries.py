"""How long a failed batch stage waits before it is tried again, and when it is given up."""

from __future__ import annotations

from datetime import timedelta

from nightshift.batch.worker import MAX_BACKOFF, MAX_FAILURES, MAX_TRANSIENT_FAILURES, retry_delay

BACKOFF = timedelta(seconds=30)


def test_the_wait_doubles_with_each_failure_up_to_the_most() -> None:
    waits = [retry_delay(n, backoff=BACKOFF, retryable=True) for n in (1, 2, 3, 10)]
    assert waits == [timedelta(seconds=30), timedelta(seconds=60), timedelta(seconds=120), MAX_BACKOFF]


def test_an_error_that_will_not_pass_is_given_up_sooner_than_one_that_may() -> None:
    assert retry_delay(MAX_FAILURES - 1, backoff=BACKOFF, retryable=False) is not None
    assert retry_delay(MAX_FAILURES, backoff=BACKOFF, retryable=False) is None
    assert retry_delay(MAX_FAILURES, backoff=BACKOFF, retryable=True) is not None
    assert retry_delay(MAX_TRANSIENT_FAILURES, backoff=BACKOFF, retryable=True) is None
