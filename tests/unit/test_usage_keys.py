"""The run views sum an item's usage by its keys in SQL: they must be the keys items are stored with."""

from __future__ import annotations

import dataclasses

from nightshift.domain.usage import USAGE_KEYS, Usage


def test_the_summed_keys_are_the_stored_ones() -> None:
    assert set(USAGE_KEYS) == set(Usage().to_json()) == {f.name for f in dataclasses.fields(Usage)}
