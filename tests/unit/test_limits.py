"""What can be stored: the one check every request body and URL goes through."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from nightshift.domain.limits import MAX_JSON_DEPTH, storage_problem, text_problem


def test_plain_values_can_be_stored() -> None:
    value = {"name": "ada", "n": 2**63 - 1, "m": -(2**63), "x": 1.5e308, "ok": True, "none": None, "list": [1, "é"]}
    assert storage_problem(value) is None
    assert text_problem("emoji 🙂 and CJK 漢字") is None


@pytest.mark.parametrize(
    ("value", "where", "reason"),
    [
        ("a\x00b", "", "NUL character (\\u0000) at position 1"),
        ({"a": {"b": ["ok", "x\x00"]}}, "a.b.1", "NUL character"),
        ({"k\x00": 1}, "'k\\x00'", "NUL character"),
        ({"a": "\ud800"}, "a", "lone UTF-16 surrogate (\\ud800)"),
        ({"\udfff": 1}, "'\\udfff'", "surrogate"),
        ({"n": 2**63}, "n", "64-bit"),
        ([0, -(2**63) - 1], "1", "64-bit"),
        ({"f": float("nan")}, "f", "finite"),
        ({"f": float("-inf")}, "f", "finite"),
    ],
)
def test_the_first_unstorable_value_is_found_with_its_path(value: Any, where: str, reason: str) -> None:
    problem = storage_problem(value)
    assert problem is not None
    assert problem.where == where
    assert reason in problem.reason


def test_nesting_past_the_limit_is_refused_without_recursion() -> None:
    nested: Any = "leaf"
    for _ in range(100_000):  # far deeper than Python's recursion limit
        nested = [nested]
    problem = storage_problem(nested)
    assert problem is not None
    assert "nested more than" in problem.reason
    assert len(problem.where) <= 120
    within: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH):
        within = {"k": within}
    assert storage_problem(within) is None


def test_pydantic_models_are_walked_through_their_fields() -> None:
    class Inner(BaseModel):
        text: str

    class Outer(BaseModel):
        items: list[Inner]

    problem = storage_problem(Outer(items=[Inner(text="ok"), Inner(text="\x00")]))
    assert problem is not None
    assert problem.where == "items.1.text"
