"""Which databases a test runs on, when not on both."""

from __future__ import annotations

import pytest

# For a test that only checks that a bad request is refused, in an empty organization: the refusal
# comes before the store, so running it on SQLite alone checks it as well as running it twice.
# (It picks the ``sqlite`` parameter of conftest's ``db_url``.) A refusal the store itself gives,
# or a test that also writes (an agent made first, a value at the limit accepted), keeps both.
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
