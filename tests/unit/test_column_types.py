"""``store.column_types.UTCDateTime`` on SQLite writes the text SQLAlchemy's own DATETIME writes.

It formats timestamps itself (in one call, where SQLAlchemy's formatting is slow): rows written
before, and timestamps bound in a ``WHERE`` compared with them as text, must read the same.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import DateTime
from sqlalchemy.dialects import sqlite

from nightshift.store.column_types import UTCDateTime

DIALECT = sqlite.dialect()
TIMES = [
    datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=UTC),
    datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(999, 1, 2, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
]


@pytest.mark.parametrize("value", TIMES, ids=str)
def test_a_timestamp_is_bound_as_sqlalchemys_datetime_binds_it_and_reads_back(value: datetime) -> None:
    ours = UTCDateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    theirs = DateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    read = UTCDateTime().dialect_impl(DIALECT).result_processor(DIALECT, None)
    assert ours is not None and theirs is not None and read is not None
    text = ours(value)
    assert text == theirs(value.astimezone(UTC).replace(tzinfo=None))
    assert read(text) == value


def test_none_stays_null_and_a_naive_timestamp_is_refused() -> None:
    bind = UTCDateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    assert bind is not None
    assert bind(None) is None
    with pytest.raises(ValueError, match="naive datetime"):
        bind(datetime(2026, 1, 2))


def test_the_texts_kept_for_the_next_rows_are_those_of_the_instant() -> None:
    # Each text is made once and then looked up (the rows of a step share a few timestamps).
    bind = UTCDateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    read = UTCDateTime().dialect_impl(DIALECT).result_processor(DIALECT, None)
    assert bind is not None and read is not None
    instant = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    elsewhere = instant.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert [bind(instant), bind(elsewhere), bind(elsewhere)] == ["2026-05-06 07:08:09.000000"] * 3
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(ValueError, match="naive datetime"):
            bind(instant.replace(tzinfo=None))
    back = read(bind(elsewhere))
    assert back == instant and back.tzinfo is UTC
