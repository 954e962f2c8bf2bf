"""The column types the tables share: timestamps that are always UTC, and JSON (JSONB on PostgreSQL).

The migrations name ``UTCDateTime`` as ``nightshift.store.tables.UTCDateTime``, which the tables
module imports from here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, TypeDecorator
from sqlalchemy.dialects.postgresql import JSONB


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python, whatever the database keeps."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        # SQLite keeps text; store it naive-UTC so lexical order is time order.
        return _naive_utc(value) if dialect.name == "sqlite" else _utc(value)

    def bind_processor(self, dialect: Dialect) -> Callable[[datetime | None], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        return _sqlite_text

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], datetime | None] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        return _sqlite_time


# SQLite keeps timestamps as text. A step binds tens of thousands of them, and its rows share a
# few (every row a step writes has the step's time): each text is made once and then looked up,
# which costs much less than making it again (and a little more for a time seen once). A time
# read is not kept: a page of agents reads hundreds, most of them different, and parsing one costs
# about what a lookup would.


@functools.lru_cache(maxsize=4096)
def _sqlite_text(value: datetime | None) -> str | None:
    """The text SQLAlchemy's SQLite DATETIME writes (a test holds the two the same), in one C call:
    its own formatting after ``process_bind_param`` costs much more. (A naive time raises at every
    call: an exception is not kept.)"""
    return None if value is None else _naive_utc(value).isoformat(" ", "microseconds")


def _sqlite_time(value: str | None) -> datetime | None:
    """SQLite's text (naive UTC, as bound above) read in one C call: SQLAlchemy's parse and then
    replace(tzinfo=UTC) cost much more."""
    return None if value is None else datetime.fromisoformat(value + "+00:00")


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("naive datetime given to the store; use datetime.now(UTC)")
    return value.astimezone(UTC)


def _naive_utc(value: datetime) -> datetime:
    return _utc(value).replace(tzinfo=None)


JSONType = JSON().with_variant(JSONB(), "postgresql")
# The same, with None stored as SQL NULL rather than JSON null (a partial index can then leave it out).
NullableJSONType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
