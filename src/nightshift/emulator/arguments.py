"""Plausible tool arguments generated from a JSON schema and the user's words. Pure, deterministic.

Strings come from the message (``city=Paris`` / ``city: Paris`` first, then capitalised words, then
other content words; text-like fields such as ``message`` or ``query`` get the whole message),
numbers from the numbers in it, booleans are true, enums take their first value, arrays hold one
item and objects are filled the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

SKIPPED: Final = frozenset({"inner_thoughts", "request_heartbeat"})
TEXT_FIELDS: Final = frozenset(
    {"message", "content", "text", "query", "prompt", "question", "body", "description", "note", "new_memory"}
)
STOPWORDS: Final = frozenset(
    """a an the and or but if then else of to in on at by for with from into about as is are was were be
    been being it its this that these those there here i me my we our you your he she they them their
    what which who whom whose when where why how can could would should will shall may might must do does
    did done please call use run using tool function invoke execute get set give tell show let lets
    some any all each every no not just also very so than too now want need like make know think""".split()
)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'\-]*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MAX_TEXT = 300


def generate_arguments(
    schema: Mapping[str, Any],
    text: str,
    *,
    exclude_words: Sequence[str] = (),
    hints: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Arguments for an object schema: every required property (every property when none is).

    Args:
        schema: The tool's parameter schema (``{"type": "object", "properties", "required"}``).
        text: The user's message the values are drawn from.
        exclude_words: Words not to use as values (the tool's name, say).
        hints: Values to use for some properties as they are.

    Returns:
        The arguments, without ``inner_thoughts`` and ``request_heartbeat``.
    """
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = schema.get("required")
    names = [n for n in (required if isinstance(required, list) else list(properties)) if n not in SKIPPED]
    words = _content_words(text, exclude_words)
    numbers = _NUMBER.findall(text)
    given = dict(hints or {})
    out: dict[str, Any] = {}
    for index, name in enumerate(names):
        if name in given:
            out[name] = given[name]
        else:
            prop = properties.get(name)
            out[name] = _value(name, prop if isinstance(prop, Mapping) else {}, text, words, numbers, index)
    return out


def _content_words(text: str, exclude: Sequence[str]) -> list[str]:
    excluded = {w.lower() for w in exclude}
    words = [w for w in _WORD.findall(text) if w.lower() not in STOPWORDS and w.lower() not in excluded]
    # Proper nouns first: they are the likeliest values ("Paris", "Alice").
    return sorted(words, key=lambda w: not w[:1].isupper())


def _explicit(name: str, text: str) -> str | None:
    pattern = rf"\b{re.escape(name)}\s*(?:=|:|\bis\b)\s*(\"[^\"]*\"|'[^']*'|[^\s,;]+)"
    match = re.search(pattern, text, flags=re.IGNORECASE)
    if match is None:
        return None
    return match.group(1).strip("\"'").rstrip(".!?")


def _type(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, Mapping) and option.get("type") != "null":
                    return _type(option)
    return "object" if "properties" in schema else "string"


def _option(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, Mapping) and option.get("type") != "null":
                    return option
    return schema


def _value(name: str, schema: Mapping[str, Any], text: str, words: list[str], numbers: list[str], index: int) -> Any:
    schema = _option(schema)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "const" in schema:
        return schema["const"]
    kind = _type(schema)
    explicit = _explicit(name, text)
    if kind == "string":
        if explicit is not None:
            return explicit
        if name.lower() in TEXT_FIELDS:
            return text.strip()[:_MAX_TEXT] or name
        return words[index % len(words)] if words else name
    if kind in ("integer", "number"):
        raw = explicit if explicit is not None and _NUMBER.fullmatch(explicit) else None
        if raw is None and numbers:
            raw = numbers[index % len(numbers)]
        number: float = float(raw) if raw is not None else 1.0
        number = max(number, float(schema.get("minimum", number)))
        number = min(number, float(schema.get("maximum", number)))
        return int(number) if kind == "integer" else number
    if kind == "boolean":
        return explicit.lower() != "false" if explicit is not None else True
    if kind == "array":
        items = schema.get("items")
        item_schema: Mapping[str, Any] = items if isinstance(items, Mapping) else {"type": "string"}
        return [_value(name, item_schema, text, words, numbers, index)]
    if kind == "object":
        return generate_arguments(schema, text) if schema.get("properties") else {}
    return None
