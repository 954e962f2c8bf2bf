"""What a block of a test leaves allocated, as tracemalloc counts it."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Allocated:
    """The bytes allocated in the block and still held at its end (set when the block ends)."""

    bytes: int = 0


@contextmanager
def allocated() -> Iterator[Allocated]:
    """Count what the block allocates and keeps; cyclic garbage is collected before and after."""
    found = Allocated()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        yield found
        gc.collect()
        found.bytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
