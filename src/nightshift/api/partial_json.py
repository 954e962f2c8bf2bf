"""The members of a JSON object whose text is still being written (a tool call's streamed arguments).

Pure: what has been received is parsed as far as it goes, without guessing what comes next.
"""

from __future__ import annotations

import json
from typing import Any, Final

_DECODER: Final = json.JSONDecoder()
_WHITESPACE: Final = " \t\n\r"


def partial_object(text: str) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """The members of a JSON object whose text is only partly written.

    Returns:
        The members whose value is complete, in order, and the member whose string value is
        still being written with its text so far (None when the text ends elsewhere). A number
        at the very end may go on, so it is not complete yet.
    """
    members: dict[str, Any] = {}
    index = _skip(text, 0)
    if not text.startswith("{", index):
        return members, None
    index += 1
    while True:
        index = _skip(text, index)
        if index >= len(text) or text[index] != '"':
            return members, None
        try:
            key, index = _DECODER.raw_decode(text, index)
        except ValueError:
            return members, None
        index = _skip(text, index)
        if not text.startswith(":", index):
            return members, None
        index = _skip(text, index + 1)
        if index >= len(text):
            return members, None
        try:
            value, end = _DECODER.raw_decode(text, index)
        except ValueError:
            if text[index] == '"':
                return members, (key, _open_string(text, index + 1))
            return members, None
        if isinstance(value, int | float) and not isinstance(value, bool) and _skip(text, end) >= len(text):
            return members, None
        members[key] = value
        index = _skip(text, end)
        if not text.startswith(",", index):
            return members, None
        index += 1


def _skip(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WHITESPACE:
        index += 1
    return index


def _open_string(text: str, index: int) -> str:
    """The characters of a JSON string started before ``index`` and not yet closed, decoded."""
    out: list[str] = []
    while index < len(text):
        char = text[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        if text[index + 1 : index + 2] == "u":
            # A high surrogate is decoded with the low one that follows it.
            size = 12 if text[index + 2 : index + 4].lower() in ("d8", "d9", "da", "db") else 6
        else:
            size = 2
        escape = text[index : index + size]
        if len(escape) < size:
            break
        try:
            out.append(json.loads(f'"{escape}"'))
        except ValueError:
            break
        index += size
    return "".join(out)
