"""``store.mapping``: the generated row writer and reader of a table agree with each other and with
the dataclass (enums by value, converters never given a None, fields without a column left out)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import pytest
from sqlalchemy import JSON, Column, Integer, MetaData, String, Table

from nightshift.store.mapping import row_reader, row_writer


class Colour(StrEnum):
    TEAL = "teal"
    RUST = "rust"


@dataclass(frozen=True, slots=True, kw_only=True)
class Thing:
    id: str
    colour: Colour
    second: Colour | None = None
    sizes: tuple[int, ...] | None = None
    count: int = 0
    note: str = "not stored"  # no column


things = Table(
    "things",
    MetaData(),
    Column("id", String, primary_key=True),
    Column("colour", String, nullable=False),
    Column("second", String),
    Column("sizes", JSON),
    Column("count", Integer, nullable=False),
    Column("unused", String),
)

write = row_writer(Thing, things, sizes=list)
read = row_reader(Thing, things, colour=Colour, second=Colour, sizes=tuple)


@pytest.mark.parametrize(
    "thing",
    [
        Thing(id="a", colour=Colour.TEAL, second=Colour.RUST, sizes=(1, 2), count=3),
        Thing(id="b", colour=Colour.RUST),
    ],
)
def test_a_thing_is_written_by_column_and_read_back(thing: Thing) -> None:
    values = write(thing)
    assert list(values) == ["id", "colour", "second", "sizes", "count"]  # the table's order, no "note"
    assert values["colour"] == thing.colour.value and type(values["colour"]) is str
    assert values["second"] == (thing.second.value if thing.second else None)
    assert values["sizes"] == (list(thing.sizes) if thing.sizes is not None else None)
    row = tuple(values.get(column.name) for column in things.columns)
    assert read(row) == thing
