"""Rows to domain objects and back, by name: a dataclass field and its column share a name.

So a column is spelled in the table (and its migration), the dataclass, and nowhere else; only
what is not stored as it is (an enum read back, a versioned JSON state) is named, as a converter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import Enum
from functools import cache
from typing import Any, TypeVar

from sqlalchemy import Row, Table

T = TypeVar("T")
Convert = Callable[[Any], Any]


def from_row(cls: type[T], row: Row[Any], **read: Convert) -> T:
    """A ``cls`` from the columns of ``row`` of the same names as its fields; ``read`` converts
    the named ones (``status=RunStatus``). A field without a column keeps its default."""
    data = row._mapping
    values: dict[str, Any] = {}
    for name in _field_names(cls):  # type: ignore[arg-type]  # (a dataclass type: hashable)
        if name not in data:
            continue
        value = data[name]
        convert = read.get(name)
        values[name] = convert(value) if convert is not None and value is not None else value
    return cls(**values)


def row_reader(cls: type[T], table: Table, **read: Convert) -> Callable[[Row[Any]], T]:
    """``from_row`` for the rows of ``select(table)`` (its columns, in its order), which it reads by
    position: reading a SQLAlchemy row by name costs about ten times as much, which tells where
    thousands of rows are read at once. A row of another number of columns is refused."""
    names = [column.name for column in table.columns]
    fields = set(_field_names(cls))  # type: ignore[arg-type]  # (a dataclass type: hashable)
    taken = [(index, name, read.get(name)) for index, name in enumerate(names) if name in fields]
    width = len(names)

    def to_object(row: Row[Any]) -> T:
        if len(row) != width:
            raise ValueError(f"a row of {len(row)} columns is not one of {table.name} ({width})")
        values: dict[str, Any] = {}
        for index, name, convert in taken:
            value = row[index]
            values[name] = convert(value) if convert is not None and value is not None else value
        return cls(**values)

    return to_object


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    # ``fields()`` rebuilds its tuple on every call: once per class, not once per row.
    return tuple(spec.name for spec in fields(cls))


def to_values(obj: object, table: Table, **write: Convert) -> dict[str, Any]:
    """The values of ``table``'s columns that ``obj`` has a field of the same name for; enums as
    their values, and ``write`` converting the named ones (``step_state=StepState.to_json``)."""
    assert is_dataclass(obj) and not isinstance(obj, type)
    names = set(_field_names(obj.__class__))
    values: dict[str, Any] = {}
    for column in table.columns:
        if column.name not in names:
            continue
        value = getattr(obj, column.name)
        convert = write.get(column.name)
        if convert is not None and value is not None:
            value = convert(value)
        elif isinstance(value, Enum):
            value = value.value
        values[column.name] = value
    return values
