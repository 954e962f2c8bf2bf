"""Identifiers: a type prefix and a time-ordered UUID (version 7 layout).

Ids sort in creation order, so cursor pagination (``before`` / ``after``) compares ids alone and
bulk inserts made in one step keep their order without a sequence column. Tool-call ids are the
exception in shape: they are sent to the providers, which limit them (see ``new_tool_call_id``).
"""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_counter = 0
# Random bits are read from the OS a few thousand at a time, not with a system call per id; a
# forked child starts with none, so that it never repeats its parent's.
_RANDOM_CHUNK = 8 * 512
_random = b""
_taken = 0


def _forget_random() -> None:
    global _random, _taken
    _random, _taken = b"", 0


os.register_at_fork(after_in_child=_forget_random)


def _uuid7() -> int:
    """A UUIDv7, as an integer, that is strictly increasing within this process."""
    global _last_ms, _counter, _random, _taken
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
        if _taken == len(_random):
            _random, _taken = os.urandom(_RANDOM_CHUNK), 0
        rand = int.from_bytes(_random[_taken : _taken + 8], "big") & ((1 << 62) - 1)
        _taken += 8
    return (now & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand


def new_id(prefix: str) -> str:
    """Return a new id such as ``agent-0192f0c4-...``."""
    digits = f"{_uuid7():032x}"  # what str(uuid.UUID(int=...)) gives, without building the UUID
    return f"{prefix}-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def new_tool_call_id() -> str:
    """Return a new id for a tool call nightshift writes itself, such as ``call-0192f0c4...``.

    ``call-`` and the UUID's 32 hex digits, 37 characters: OpenAI refuses tool-call ids over 40
    characters and Anthropic ids outside ``^[a-zA-Z0-9_-]+$``, so both take it as it is.
    """
    return f"call-{_uuid7():032x}"
