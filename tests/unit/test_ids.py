"""Ids: well-formed UUIDv7s after a type prefix, strictly increasing in one process, never repeated."""

from __future__ import annotations

import os
import uuid

from nightshift.ids import new_id, new_tool_call_id


def test_an_id_is_its_prefix_and_a_version_7_uuid() -> None:
    made = new_id("message")

    prefix, _, rest = made.partition("-")
    parsed = uuid.UUID(rest)
    assert prefix == "message"
    assert str(parsed) == rest
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122


def test_ids_increase_and_never_repeat_across_many_in_one_millisecond() -> None:
    # More ids than one chunk of random bits holds, most of them within the same milliseconds.
    made = [new_id("item") for _ in range(5_000)]

    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_a_forked_child_never_repeats_its_parents_random_bits() -> None:
    new_id("warm")  # the parent holds a chunk of random bits when it forks
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, "\n".join(new_id("x")[-12:] for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as stream:
        child = set(stream.read().split())
    os.waitpid(pid, 0)
    parent = {new_id("x")[-12:] for _ in range(50)}

    assert len(child) == 50
    assert not child & parent


def test_a_tool_call_id_fits_both_providers() -> None:
    made = new_tool_call_id()

    assert made.startswith("call-")
    assert len(made) == 37
    assert uuid.UUID(hex=made.removeprefix("call-")).version == 7
