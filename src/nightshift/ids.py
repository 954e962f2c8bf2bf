"""Identifiers: a type prefix and a time-ordered UUID (version 7 layout).

Ids sort in creation order, so cursor pagination (``before`` / ``after``) compares ids alone and
bulk inserts made in one step keep their order without a sequence column. Tool-call ids are the
exception in shape: they are sent to the providers, which limit them (see ``new_tool_call_id``).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def _uuid7() -> uuid.UUID:
    """A UUIDv7 that is strictly increasing within this process."""
    global _last_ms, _counter
    with _lock:
        now = time.time_ns() // 1_000_000
        if now <= _last_ms:
            # Same (or earlier) millisecond: bump a 12-bit counter, borrowing the next millisecond
            # when it overflows, so ids never repeat or go backwards in one process.
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            now = _last_ms
        else:
            _last_ms = now
            _counter = 0
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (now & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand
    return uuid.UUID(int=value)


def new_id(prefix: str) -> str:
    """Return a new id such as ``agent-0192f0c4-...``."""
    return f"{prefix}-{_uuid7()}"


def new_tool_call_id() -> str:
    """Return a new id for a tool call nightshift writes itself, such as ``call-0192f0c4...``.

    ``call-`` and the UUID's 32 hex digits, 37 characters: OpenAI refuses tool-call ids over 40
    characters and Anthropic ids outside ``^[a-zA-Z0-9_-]+$``, so both take it as it is.
    """
    return f"call-{_uuid7().hex}"
