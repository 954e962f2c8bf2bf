"""What text the databases cannot hold, made storable: NUL characters and lone surrogates.

PostgreSQL refuses both in TEXT and JSONB (SQLite takes them), and a model's reply or a tool's
result may hold either. The API refuses them in what callers send (a 422); what comes from a
model or a tool is stored with each NUL as U+FFFD and each lone surrogate as ``?``, on both
databases alike, so that no such reply can fail the write of a whole step.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from sqlalchemy import Dialect, String, Text, TypeDecorator

REPLACEMENT = "\ufffd"
# orjson writes a NUL character as \u0000; an escaped backslash before it is text, not a NUL.
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def clean_text(value: str) -> str:
    """``value`` with NUL characters and lone surrogates replaced (the same string when it has none)."""
    if "\x00" in value:
        value = value.replace("\x00", REPLACEMENT)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def dumps(value: Any) -> str:
    """JSON text for a JSON column, with NUL characters and lone surrogates replaced."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:  # a lone surrogate, which orjson refuses
        text = json.dumps(value, ensure_ascii=False).encode("utf-8", "replace").decode("utf-8")
    if "\\u0000" in text:
        text = _JSON_NUL.sub(lambda match: match.group(1) + "\\ufffd", text)
    return text


class CleanText(TypeDecorator[str]):
    """TEXT that stores what :func:`clean_text` makes of a value."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else clean_text(value)


class CleanString(TypeDecorator[str]):
    """VARCHAR that stores what :func:`clean_text` makes of a value."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else clean_text(value)
