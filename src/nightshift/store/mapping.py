"""Rows to domain objects and back, by name: a dataclass field and its column share a name.

So a column is spelled in the table (and its migration), the dataclass, and nowhere else; only
what is not stored as it is (an enum read back, a versioned JSON state) is named, as a converter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from enum import Enum
from functools import cache
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from sqlalchemy import Row, Table

T = TypeVar("T")
Convert = Callable[[Any], Any]


def from_row(cls: type[T], row: Row[Any], **read: Convert) -> T:
    """A ``cls`` from the columns of ``row`` of the same names as its fields; ``read`` converts
    the named ones (``status=BatchRunStatus``). A field without a column keeps its default."""
    data = row._mapping
    values: dict[str, Any] = {}
    for name in _field_names(cls):  # type: ignore[arg-type]  # (a dataclass type: hashable)
        if name not in data:
            continue
        value = data[name]
        convert = read.get(name)
        values[name] = convert(value) if convert is not None and value is not None else value
    return cls(**values)


def row_reader(
    cls: type[T],
    table: Table,
    *,
    before: int = 0,
    after: int = 0,
    given: tuple[str, ...] = (),
    **read: Convert,
) -> Callable[..., T]:
    """``from_row`` for rows that hold ``table``'s columns in its order (``select(table)``), read by
    position: reading a SQLAlchemy row by name costs much more, which tells where
    thousands of rows are read at once.

    ``before`` and ``after`` columns of the row, around the table's, are someone else's (an agent
    id before a block, say); the fields named in ``given`` come from the caller, as positional
    arguments after the row, in that order. ``read`` converts the named columns (never a NULL).
    A row of another number of columns is refused (ValueError), as is a field that is neither a
    column nor given (TypeError).
    """
    names = [column.name for column in table.columns]
    wanted = set(_field_names(cls)) - set(given)  # type: ignore[arg-type]  # (a dataclass type: hashable)
    slots = [f"_{i}" for i in range(before + len(names) + after)]
    values = [f"{name}={name}" for name in given]
    scope: dict[str, Any] = {"cls": cls}
    for index, column in enumerate(table.columns):
        if column.name not in wanted:
            continue
        slot = slots[before + index]
        convert = read.get(column.name)
        if convert is None:
            values.append(f"{column.name}={slot}")
            continue
        scope[f"read_{column.name}"] = convert
        call = f"read_{column.name}({slot})"
        values.append(f"{column.name}=" + (f"None if {slot} is None else {call}" if column.nullable else call))
    # Generated, as dataclasses generates __init__: one unpacking and one call per row, the cost
    # of a mapping written by hand; the unpacking also refuses a row of another width.
    source = f"def read(row, {', '.join(given)}):\n    {', '.join(slots)}, = row\n    return cls({', '.join(values)})\n"
    exec(compile(source, f"<row_reader {cls.__name__} {table.name}>", "exec"), scope)
    reader: Callable[..., T] = scope["read"]
    return reader


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    # ``fields()`` rebuilds its tuple on every call: once per class, not once per row.
    return tuple(spec.name for spec in fields(cls))


def row_writer(cls: type[T], table: Table, **write: Convert) -> Callable[[T], dict[str, Any]]:
    """The values of ``table``'s columns that a ``cls`` has a field of the same name for, by
    column name: enums as their values, and ``write`` converting the named ones
    (``step_state=StepState.to_json``; never given a None). Generated as ``row_reader`` is: a step
    writes its items and agents by the ten thousand."""
    hints = get_type_hints(cls)
    wanted = set(_field_names(cls))  # type: ignore[arg-type]  # (a dataclass type: hashable)
    scope: dict[str, Any] = {}
    values: list[str] = []
    for column in table.columns:
        name = column.name
        if name not in wanted:
            continue
        convert = write.get(name)
        if convert is not None:
            scope[f"write_{name}"] = convert
            call = f"write_{name}(obj.{name})"
        elif _is_enum(hints[name]):
            call = f"obj.{name}.value"
        else:
            values.append(f"{name!r}: obj.{name}")
            continue
        values.append(f"{name!r}: None if obj.{name} is None else {call}")
    source = f"def write(obj):\n    return {{{', '.join(values)}}}\n"
    exec(compile(source, f"<row_writer {cls.__name__} {table.name}>", "exec"), scope)
    writer: Callable[[T], dict[str, Any]] = scope["write"]
    return writer


def _is_enum(hint: Any) -> bool:
    """Whether a field's type is an enum, or an enum or None."""
    options = get_args(hint) if isinstance(hint, UnionType) or get_origin(hint) is Union else (hint,)
    return any(isinstance(o, type) and issubclass(o, Enum) for o in options)
