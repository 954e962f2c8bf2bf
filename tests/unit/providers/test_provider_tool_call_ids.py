"""Tool-call ids on the wire: kept when the provider accepts them, a stable stand-in otherwise."""

from __future__ import annotations

import re

import pytest

from nightshift.ids import new_tool_call_id
from nightshift.providers.tool_call_ids import anthropic_tool_use_id, openai_tool_call_id

OLD_GREETING = "call-0192f0c4-1a2b-7c3d-8e4f-a5b6c7d8e9f0"  # what agents created before hold: 41 characters
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def test_the_old_greeting_id_is_too_long_for_openai_and_gets_a_stand_in() -> None:
    assert len(OLD_GREETING) == 41
    wire = openai_tool_call_id(OLD_GREETING)

    assert len(wire) <= 40 and wire.startswith("call_")
    assert wire == openai_tool_call_id(OLD_GREETING)  # the call and its result get the same id
    assert wire != openai_tool_call_id(OLD_GREETING + "x")


@pytest.mark.parametrize(
    "stored",
    ["toolu_01AbmHJypDhKqBF7NKdRPJ6d", "call_sS3HejVTEiGEJGwTW7bxHKh8", "c1", "x" * 40],
)
def test_ids_openai_accepts_are_kept(stored: str) -> None:
    assert openai_tool_call_id(stored) == stored


@pytest.mark.parametrize("stored", ["toolu_01AbmHJypDhKqBF7NKdRPJ6d", "call_sS3HejVTEiGEJGwTW7bxHKh8", OLD_GREETING])
def test_ids_anthropic_accepts_are_kept(stored: str) -> None:
    assert anthropic_tool_use_id(stored) == stored


@pytest.mark.parametrize("stored", ["call.1", "call_a|fc_b", "bash:12", "", "id with spaces", "é"])
def test_ids_anthropic_refuses_get_a_stand_in_both_accept(stored: str) -> None:
    wire = anthropic_tool_use_id(stored)

    assert ANTHROPIC_ID.fullmatch(wire) and len(wire) <= 40
    assert openai_tool_call_id(wire) == wire and anthropic_tool_use_id(wire) == wire
    assert wire == anthropic_tool_use_id(stored)


def test_an_empty_id_is_never_sent_to_openai() -> None:
    assert 0 < len(openai_tool_call_id("")) <= 40


def test_new_tool_call_ids_are_valid_for_both_providers_as_they_are() -> None:
    ids = {new_tool_call_id() for _ in range(100)}

    assert len(ids) == 100
    for call_id in ids:
        assert len(call_id) <= 40 and ANTHROPIC_ID.fullmatch(call_id)
        assert openai_tool_call_id(call_id) == call_id and anthropic_tool_use_id(call_id) == call_id
