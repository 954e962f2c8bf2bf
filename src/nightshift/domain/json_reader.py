"""Reading a large JSON document on a worker thread without starving the event loop.

``json.loads`` reads a whole document in one call into C, which holds the interpreter's lock
from start to end: on a thread, a large document still stops the event loop for as long as it
takes, and very deep nesting ends in a ``RecursionError`` instead of a decoding error.

:func:`read_json` gives C one value at a time, and only a value whose text fits in a window of
``WINDOW`` characters; a larger object or array is opened here, and its members read the same
way; so is a longer string (a double-encoded document is one). Between two calls the
interpreter may switch threads, so no call holds the lock for longer than reading one window
takes. Nesting is counted as containers are opened here
(and measured in what C read, when its brackets say it may be too deep), and a document deeper
than ``max_depth`` is refused, with the path where it went past.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json import JSONDecodeError
from json.scanner import make_scanner
from typing import Any, cast

# The most text read by one call into C; a larger container is opened here.
WINDOW = 64 * 1024
# The first window tried for a member; it grows fourfold while the member does not fit in it.
_FIRST_WINDOW = 1024
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# A string's text ending in the first half of a surrogate pair written as escapes.
_HIGH_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\Z")
# The longest text an escape spans: a surrogate pair, two \uXXXX escapes.
_LONGEST_ESCAPE = 12

Path = tuple[str | int, ...]


class JSONTooDeep(ValueError):
    """The document nests objects and arrays deeper than allowed; ``path`` is where it went past."""

    def __init__(self, path: Path, max_depth: int) -> None:
        super().__init__(f"it is nested more than {max_depth} levels deep")
        self.path = path
        self.max_depth = max_depth


def read_json(raw: bytes | str, *, max_depth: int) -> Any:
    """The value of a JSON document, read as ``json.loads`` reads it (the same values, and the
    same ``JSONDecodeError`` for bad text), in calls into C no larger than ``WINDOW``.

    Raises:
        JSONTooDeep: objects and arrays nested more than ``max_depth`` levels.
        ValueError: not JSON (``JSONDecodeError``), not UTF-8/16/32, or a number too long to read.
    """
    if isinstance(raw, bytes):
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    else:
        text = raw
    if text.startswith("\ufeff"):
        raise JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _Reader(text, max_depth).document()


def _deeper(value: Any, text: str, start: int, end: int, allowed: int) -> bool:
    """Whether ``value`` (read from ``text[start:end]``) nests more than ``allowed`` containers.

    Its brackets are counted first (in C): no more of them than allowed, and it cannot be.
    """
    if text.count("[", start, end) + text.count("{", start, end) <= allowed:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > allowed:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class _Reader:
    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.max_depth = max_depth
        # C's reader of one value, as json.loads uses it (strict: no control characters in strings).
        # (typeshed types its argument as the scanner class itself; it takes the decoder)
        self.scan: Callable[[str, int], tuple[Any, int]] = cast(Any, make_scanner)(json.JSONDecoder())

    def _space(self, index: int) -> int:
        found = _WHITESPACE.match(self.text, index)
        return found.end() if found is not None else index

    def document(self) -> Any:
        start = self._space(0)
        value, end = self._value(start, (), 0)
        end = self._space(end)
        if end != len(self.text):
            raise JSONDecodeError("Extra data", self.text, end)
        return value

    def _value(self, index: int, path: Path, hint: int) -> tuple[Any, int]:
        """The value starting at ``index`` and where it ends; ``hint``: a likely size of its text."""
        first = self.text[index : index + 1]
        if first == '"':
            return self._string(index, hint)
        if first not in ("{", "["):
            try:
                return self.scan(self.text, index)  # a number or a literal: C reads just that
            except StopIteration:
                raise JSONDecodeError("Expecting value", self.text, index) from None
        if len(path) >= self.max_depth:
            raise JSONTooDeep(path, self.max_depth)
        small = self._windowed(index, hint)
        if small is not None and not _deeper(small[0], self.text, index, small[1], self.max_depth - len(path)):
            return small
        return self._object(index, path) if first == "{" else self._array(index, path)

    def _string(self, index: int, hint: int) -> tuple[str, int]:
        """The string at ``index``: read by C when it fits in a window, else a window at a time."""
        small = self._windowed(index, hint)
        if small is not None:
            return small
        text = self.text
        parts: list[str] = []
        start = index + 1
        while True:
            piece = text[start : start + WINDOW]
            if not piece:
                raise JSONDecodeError("Unterminated string starting at", text, index)
            piece = self._whole_escapes(piece)
            try:
                value, end = self.scan(f'"{piece}"', 0)  # the piece, closed by a quote of ours
            except JSONDecodeError as exc:
                where = index if exc.msg.startswith("Unterminated") else start + exc.pos - 1
                raise JSONDecodeError(exc.msg, text, where) from None
            parts.append(value)
            if end < len(piece) + 2:
                return "".join(parts), start + end - 1  # its own closing quote was in the piece
            start += len(piece)

    @staticmethod
    def _whole_escapes(piece: str) -> str:
        """``piece`` without an escape (or a surrogate pair of escapes) its end would cut in two."""
        if len(piece) < WINDOW:
            return piece  # the end of the document
        last = piece.rfind("\\", len(piece) - _LONGEST_ESCAPE)
        if last < 0:
            return piece
        first = last
        while first > 0 and piece[first - 1] == "\\":
            first -= 1
        # A run of backslashes is escaped backslashes, two by two, and maybe one escape's start.
        cut = last + 1 if (last - first) % 2 else last
        if _HIGH_SURROGATE_ESCAPE.search(piece, 0, cut):
            cut -= 6
        return piece[:cut]

    def _windowed(self, index: int, hint: int) -> tuple[Any, int] | None:
        """The container at ``index`` read by C, when its text fits in a window; else None.

        A container that ends inside a window reads the same there as in the whole text. One
        that does not end there, or that C cannot read (deep nesting, bad text), is left to be
        opened here: its members are then read one by one, and a real error found at its place.
        """
        size = max(_FIRST_WINDOW, min(hint, WINDOW))
        while True:
            window = self.text[index : index + size]
            try:
                value, end = self.scan(window, 0)
                return value, index + end
            except (ValueError, StopIteration, RecursionError):
                if size >= WINDOW or index + size >= len(self.text):
                    return None
                size = min(WINDOW, size * 4)

    def _object(self, index: int, path: Path) -> tuple[dict[str, Any], int]:
        text = self.text
        found: dict[str, Any] = {}
        index = self._space(index + 1)
        if text[index : index + 1] == "}":
            return found, index + 1
        hint = 0
        while True:
            if text[index : index + 1] != '"':
                raise JSONDecodeError("Expecting property name enclosed in double quotes", text, index)
            key, index = self._string(index, 0)
            index = self._space(index)
            if text[index : index + 1] != ":":
                raise JSONDecodeError("Expecting ':' delimiter", text, index)
            start = self._space(index + 1)
            found[key], index = self._value(start, (*path, key), hint)
            hint = 2 * (index - start)
            index = self._space(index)
            following = text[index : index + 1]
            if following == "}":
                return found, index + 1
            if following != ",":
                raise JSONDecodeError("Expecting ',' delimiter", text, index)
            index = self._space(index + 1)

    def _array(self, index: int, path: Path) -> tuple[list[Any], int]:
        text = self.text
        found: list[Any] = []
        index = self._space(index + 1)
        if text[index : index + 1] == "]":
            return found, index + 1
        hint = 0
        while True:
            start = index
            value, index = self._value(start, (*path, len(found)), hint)
            found.append(value)
            hint = 2 * (index - start)
            index = self._space(index)
            following = text[index : index + 1]
            if following == "]":
                return found, index + 1
            if following != ",":
                raise JSONDecodeError("Expecting ',' delimiter", text, index)
            index = self._space(index + 1)
