"""PATCH bodies become typed updates: absent keeps a field, null keeps it too except where it may clear."""

from __future__ import annotations

from nightshift.api.schemas import BlockUpdate
from nightshift.api.tool_schemas import ToolUpdate
from nightshift.domain.unset import UNSET, given, set_fields
from nightshift.services.blocks import BlockChanges
from nightshift.services.tools import ToolChanges


def test_an_absent_block_field_is_unset() -> None:
    assert BlockUpdate.model_validate({"value": "x"}).to_changes() == BlockChanges(value="x")


def test_null_clears_a_block_description_and_keeps_the_rest() -> None:
    body = BlockUpdate.model_validate({"description": None, "label": None, "limit": None})
    assert body.to_changes() == BlockChanges(description=None)
    assert set_fields(body.to_changes()) == {"description": None}


def test_null_keeps_a_tool_field() -> None:
    body = ToolUpdate.model_validate({"description": None, "tags": ["a"]})
    assert body.to_changes() == ToolChanges(tags=["a"])


def test_given_maps_only_none_to_unset() -> None:
    assert given(None) is UNSET
    assert given(0) == 0
    assert given("") == ""
    assert repr(UNSET) == "UNSET"
