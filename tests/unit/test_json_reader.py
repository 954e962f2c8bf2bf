"""The JSON reader an Agent File import uses: the values ``json.loads`` gives, bounded nesting."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nightshift.domain.json_reader import WINDOW, JSONTooDeep, read_json

SAMPLES = [
    "{}",
    "[]",
    ' [1, 2.5, -3e4, "x\\u00e9\\ud83d\\ude00", true, false, null, NaN, Infinity, {"a": [ ]}] ',
    '"just text"',
    '{"a": {"b": {"c": [1, [2, [3, {"d": "e"}]]]}}, "a2": 1, "a2": 2}',
    json.dumps({"big": [{"id": i, "text": "x" * 50} for i in range(5000)]}),  # members opened one by one
    json.dumps([["y" * 1000] * 200] * 3),
]
BAD = ["", " ", "[", '{"a":', '{"a":1,}', "[1,]", "[1 2]", '{"a" 1}', "123 4", '{"a":"\x00"}', "{'a': 1}", "[1]x"]


@pytest.mark.parametrize("text", SAMPLES)
def test_it_reads_what_json_loads_reads(text: str) -> None:
    assert read_json(text, max_depth=20) == json.loads(text)
    assert read_json(text.encode("utf-16"), max_depth=20) == json.loads(text.encode("utf-16"))


def _error(text: str | bytes, read: Any) -> tuple[str, str]:
    with pytest.raises(ValueError) as caught:
        read(text)
    return type(caught.value).__name__, str(caught.value)


@pytest.mark.parametrize("text", [*BAD, json.dumps({"a": ["b" * 100] * 5000})[:-3] + ",}]}"])
def test_bad_text_gets_the_error_json_loads_gives(text: str) -> None:
    assert _error(text, lambda t: read_json(t, max_depth=20)) == _error(text, json.loads)


@pytest.mark.parametrize("nesting", [WINDOW // 8, 200_000])
def test_deep_nesting_is_refused_where_it_goes_past_the_limit(nesting: int) -> None:
    # json.loads ends such a document in a RecursionError, which is no decoding error.
    with pytest.raises(JSONTooDeep) as caught:
        read_json('{"a": ' + "[" * nesting + "]" * nesting + "}", max_depth=10)
    assert caught.value.path == ("a", 0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert str(caught.value) == "it is nested more than 10 levels deep"


def test_nesting_up_to_the_limit_is_read() -> None:
    text = "[" * 10 + "]" * 10
    assert read_json(text, max_depth=10) == json.loads(text)
    with pytest.raises(JSONTooDeep):
        read_json("[" + text + "]", max_depth=10)


@pytest.mark.parametrize("escape", ["\U0001f600", "\ud800", '"', "\\", "\n", "\u00e9", "\\\\\\"])
def test_a_string_longer_than_a_window_is_read_whole(escape: str) -> None:
    # The escape (a surrogate pair, written as two escapes, among them) falls at every place
    # around the end of the first window: none may be cut in two.
    for before in range(WINDOW - 16, WINDOW + 4):
        value = "a" * before + escape + "b" * 20 + escape
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False), json.dumps({"k": [value]})):
            assert read_json(text, max_depth=5) == json.loads(text), (escape, before)


def test_a_double_encoded_document_reads_as_json_loads_reads_it() -> None:
    inner = json.dumps({"agents": [{"name": "x" * 10, "text": '\U0001f600 "quoted" \\ ' * 20_000}]})
    outer = json.dumps(inner).encode()
    assert read_json(read_json(outer, max_depth=5), max_depth=5) == json.loads(json.loads(outer))
