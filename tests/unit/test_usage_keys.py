"""The run views sum an item's usage by its keys in SQL: they must be the keys items are stored with."""

from __future__ import annotations

from nightshift.batch.outcomes import usage_json
from nightshift.providers.base import Usage
from nightshift.store.batch_summaries import USAGE_KEYS


def test_the_summed_keys_are_the_stored_ones() -> None:
    assert set(USAGE_KEYS) == set(usage_json(Usage()))
