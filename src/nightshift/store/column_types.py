"""The column types the tables share: timestamps that are always UTC, and JSON (JSONB on PostgreSQL).

The migrations name ``UTCDateTime`` as ``nightshift.store.tables.UTCDateTime``, which the tables
module imports from here.
"""

from __future__ import annotations

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
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use datetime.now(UTC)")
        value = value.astimezone(UTC)
        # SQLite keeps text; store it naive-UTC so lexical order is time order.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], datetime | None] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        # SQLite's text (naive UTC, as bound above) read in one C call: SQLAlchemy's parse and
        # then replace(tzinfo=UTC) cost much more, and a page of agents reads hundreds.
        def from_text(value: str | None) -> datetime | None:
            return None if value is None else datetime.fromisoformat(value + "+00:00")

        return from_text


JSONType = JSON().with_variant(JSONB(), "postgresql")
# The same, with None stored as SQL NULL rather than JSON null (a partial index can then leave it out).
NullableJSONType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
