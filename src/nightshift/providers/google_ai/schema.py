"""Tools' JSON schemas as Gemini function-declaration schemas, or why one cannot be.

Gemini takes an OpenAPI subset (its ``Schema``): upper-case ``type`` names, ``nullable`` instead
of a ``"null"`` type, ``anyOf`` but no ``oneOf``/``allOf``/``not``, no ``$ref``, no
``additionalProperties``, enums of strings only. ``gemini_schema`` translates what has a faithful
translation and raises ``UnsupportedSchema`` (naming where and what) for the rest, so that a tool
Gemini cannot be given is refused when it meets a Gemini agent, never when a step is sent.

Translated: a type list with ``"null"`` (``nullable``), ``const`` (a one-value enum), ``oneOf``
(``anyOf``: the model writes one branch either way), an ``allOf`` of one schema, ``$ref`` to
``$defs``/``definitions`` (inlined). Dropped, as annotations that do not change what a valid
call is or that Gemini does not check: ``$schema``, ``$id``, ``$comment``, ``examples``,
``additionalProperties``, ``uniqueItems``, ``multipleOf``, ``readOnly``, ``writeOnly``,
``deprecated``, and ``format`` values Gemini does not know; an empty ``properties`` and the
``required`` names no property has (Gemini refuses both). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

_TYPES: Final = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
_FORMATS: Final = {
    "STRING": frozenset({"enum", "date-time"}),
    "INTEGER": frozenset({"int32", "int64"}),
    "NUMBER": frozenset({"float", "double"}),
}
# Kept as they are (Schema has them under the same name).
_KEPT: Final = frozenset(
    {
        "title",
        "description",
        "default",
        "example",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "propertyOrdering",
    }
)
_DROPPED: Final = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "examples",
        "additionalProperties",
        "uniqueItems",
        "multipleOf",
        "readOnly",
        "writeOnly",
        "deprecated",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "nullable",
    }
)
_REFUSED: Final = {
    "not": "'not'",
    "if": "'if'/'then'/'else'",
    "then": "'if'/'then'/'else'",
    "else": "'if'/'then'/'else'",
    "patternProperties": "'patternProperties'",
    "dependentRequired": "'dependentRequired'",
    "dependentSchemas": "'dependentSchemas'",
    "prefixItems": "tuple arrays ('prefixItems')",
    "contains": "'contains'",
    "propertyNames": "'propertyNames'",
    "unevaluatedProperties": "'unevaluatedProperties'",
}


class UnsupportedSchema(ValueError):
    """A tool's schema uses a JSON Schema feature Gemini's function declarations cannot express."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what} is not supported by Gemini")
        self.where = where
        self.what = what


def gemini_schema(schema: Mapping[str, Any], *, where: str = "parameters") -> dict[str, Any]:
    """``schema`` as a Gemini ``Schema`` (REST JSON).

    Raises:
        UnsupportedSchema: A feature with no faithful translation (see the module docstring).
    """
    definitions = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    return _convert(schema, where, definitions, ())


def unsupported(schema: Mapping[str, Any] | None) -> str | None:
    """Why a tool's parameter schema cannot be given to Gemini, or None when it can."""
    try:
        gemini_schema(schema or {})
    except UnsupportedSchema as exc:
        return str(exc)
    return None


def _convert(
    schema: Mapping[str, Any], where: str, definitions: Mapping[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        raise UnsupportedSchema(where, f"a schema that is not an object ({schema!r})")
    if "$ref" in schema:
        return _convert(_resolved(schema, where, definitions, seen), where, definitions, (*seen, schema["$ref"]))
    out: dict[str, Any] = {}
    nullable = schema.get("nullable") is True
    for key, value in schema.items():
        if key in _REFUSED:
            raise UnsupportedSchema(where, _REFUSED[key])
        if key in _KEPT:
            out[key] = value
        elif key == "type":
            kind, null = _type(value, where)
            nullable = nullable or null
            if kind is not None:
                out["type"] = kind
        elif key == "properties":
            out["properties"] = {
                name: _convert(sub, f"{where}.{name}", definitions, seen) for name, sub in (value or {}).items()
            }
        elif key == "required":
            out["required"] = list(value)
        elif key == "items":
            if not isinstance(value, Mapping):
                raise UnsupportedSchema(where, "tuple arrays ('items' as a list)")
            out["items"] = _convert(value, f"{where}[]", definitions, seen)
        elif key in ("anyOf", "oneOf"):
            branches = [_convert(b, f"{where}.{key}[{i}]", definitions, seen) for i, b in enumerate(value)]
            rest = [b for b in branches if b != {"type": "NULL"}]
            nullable = nullable or len(rest) < len(branches)
            if len(rest) == 1:
                out.update(rest[0])
            else:
                out["anyOf"] = rest
        elif key == "allOf":
            if len(value) != 1:
                raise UnsupportedSchema(where, "'allOf' of several schemas")
            out.update(_convert(value[0], f"{where}.allOf[0]", definitions, seen))
        elif key in ("enum", "const"):
            values = list(value) if key == "enum" else [value]
            if not all(isinstance(v, str) for v in values if v is not None):
                raise UnsupportedSchema(where, "an enum of values that are not strings")
            nullable = nullable or None in values
            out["enum"] = [v for v in values if v is not None]
        elif key == "format":
            continue  # kept below, once the type is known
        elif key not in _DROPPED:
            raise UnsupportedSchema(where, f"the keyword {key!r}")
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS.get(out.get("type", ""), ()):
        out["format"] = fmt
    if "enum" in out:
        out.setdefault("type", "STRING")
        out["format"] = "enum"
    if "properties" in out:
        out.setdefault("type", "OBJECT")
        if not out["properties"]:
            del out["properties"]  # Gemini refuses an empty one; an OBJECT alone is any object
    if "required" in out:
        # Gemini refuses a required name it has no property of (JSON Schema lets one through).
        out["required"] = [name for name in out["required"] if name in out.get("properties", {})]
        if not out["required"]:
            del out["required"]
    if nullable:
        out["nullable"] = True
    return out


def _type(value: Any, where: str) -> tuple[str | None, bool]:
    """A JSON Schema ``type`` as Gemini's type name and whether ``null`` was among them."""
    names = [value] if isinstance(value, str) else list(value)
    null = "null" in names
    rest = [n for n in names if n != "null"]
    if not rest:
        return ("NULL" if null else None), False
    if len(rest) > 1:
        raise UnsupportedSchema(where, f"a value of several types ({', '.join(rest)}); use anyOf")
    if rest[0] not in _TYPES:
        raise UnsupportedSchema(where, f"the type {rest[0]!r}")
    return _TYPES[rest[0]], null


def _resolved(
    schema: Mapping[str, Any], where: str, definitions: Mapping[str, Any], seen: tuple[str, ...]
) -> Mapping[str, Any]:
    ref = schema["$ref"]
    if ref in seen:
        raise UnsupportedSchema(where, f"a recursive reference ({ref})")
    for prefix in ("#/$defs/", "#/definitions/"):
        if isinstance(ref, str) and ref.startswith(prefix) and ref[len(prefix) :] in definitions:
            target = definitions[ref[len(prefix) :]]
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            return {**target, **siblings}
    raise UnsupportedSchema(where, f"a reference that does not point into the schema's $defs ({ref!r})")
