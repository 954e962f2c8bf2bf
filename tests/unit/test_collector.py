"""The cycle collector's pauses: overlapping pauses end with the last, and a collector the process
had turned off stays off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from nightshift.collector import collector_paused


@pytest.fixture(autouse=True)
def collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_overlapping_pauses_end_with_the_last() -> None:
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_pause_ends_even_when_its_work_fails() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the import failed")
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
