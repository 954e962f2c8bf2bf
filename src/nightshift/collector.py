"""CPython's cycle collector, kept from holding the process for long.

A full collection walks every object the process holds, with the interpreter held: no other
thread runs, and the event loop answers nobody. That costs little while the heap is small, but a
stage builds hundreds of thousands of objects (a batch's agents, messages, requests and results)
and an Agent File import a million (a large file's parsed document and the rows built from it),
and then one full collection holds the process long enough for its clients to notice.
Nearly none of those objects is cyclic garbage: reference counting frees them when they are let
go. So the worker makes full collections rare (``rare_full_collections``), and an import pauses
the collector while it holds its objects (``collector_paused``). A server that has shut down
exits without a last walk over its objects (``no_collection_at_exit``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

# How many collections of the middle generation CPython's cycle collector makes before a full one
# while a worker runs (its default is 10; see ``rare_full_collections``).
FULL_COLLECTION_AFTER = 1_000


@contextmanager
def rare_full_collections() -> Iterator[None]:
    """Let CPython's cycle collector scan every object a hundred times less often.

    By default a full collection comes every ten young ones, many times in a large run, each
    walking every object a stage holds (``make bench`` prints the CPU of applying a step). Young
    cycles are still collected as before, so this costs no memory. The thresholds are the
    process's: they are put back as they were when the block ends.
    """
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, max(full, FULL_COLLECTION_AFTER))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, full)


class _Pauses:
    """Who holds the collector paused, so that overlapping pauses end with the last of them."""

    def __init__(self) -> None:
        self.holders = 0
        self.was_enabled = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        if self.holders == 0:
            self.was_enabled = gc.isenabled()
            gc.disable()
        self.holders += 1
        try:
            yield
        finally:
            self.holders -= 1
            if self.holders == 0 and self.was_enabled:
                gc.enable()


_PAUSES = _Pauses()


def collector_paused() -> AbstractContextManager[None]:
    """No cycle collection at all until the block ends (and every other such block with it).

    For work that makes a large heap for a few seconds, entered and left on the event loop's
    thread, even when the work runs in worker threads: other requests' cyclic garbage waits for
    the end of the block, and the work's own objects are freed by reference counting.
    """
    return _PAUSES.paused()


def no_collection_at_exit() -> None:
    """Spare the interpreter's exit its full collections: everything the process holds is freed
    when it ends anyway.

    Python's finalization collects cycles more than once while it takes the modules apart, each
    time walking every object the process still holds (a server's libraries, its parts, the
    heap a stage left). A ``serve`` that had answered its last request and closed everything spent
    longer on that than on its whole shutdown, on a busy machine, and whoever stops it (a
    supervisor, a deployment, its parent waiting for its child poller) waits for it. The objects
    move to the collector's permanent generation, which no collection walks.
    """
    gc.freeze()
