"""Each tool's provider form is made once per schema object (``providers.tool_lists``), and the
requests built from it are the same as when each is made anew."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nightshift.providers import tool_lists
from nightshift.providers.anthropic import wire as anthropic_wire
from nightshift.providers.google_ai import wire as google_wire
from nightshift.providers.openai import wire as openai_wire

NOTE = {
    "name": "note",
    "description": "Keep a note.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}
PING = {"name": "ping", "description": "", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    "to_tools",
    [
        anthropic_wire.to_tools,
        openai_wire.to_tools,
        lambda tools, agent_arguments: google_wire.to_declarations(tools, agent_arguments),
    ],
    ids=["anthropic", "openai", "google_ai"],
)
@pytest.mark.parametrize("agent_arguments", [True, False])
def test_a_schema_is_converted_once_and_equal_schemas_convert_alike(to_tools: Any, agent_arguments: bool) -> None:
    first = to_tools([NOTE, PING], agent_arguments=agent_arguments)
    again = to_tools([NOTE, PING], agent_arguments=agent_arguments)
    fresh = to_tools(copy.deepcopy([NOTE, PING]), agent_arguments=agent_arguments)

    assert first == again == fresh
    assert all(a is b for a, b in zip(first, again, strict=True))  # the same objects: made once
    assert not any(a is b for a, b in zip(first, fresh, strict=True))  # other schemas: made for them
    assert first is not again  # each call its own list: a request may replace an element
    other = to_tools([NOTE], agent_arguments=not agent_arguments)
    assert other != first[:1]


def test_a_conversion_that_raises_is_not_kept_and_a_full_store_starts_again() -> None:
    calls: list[str] = []

    @tool_lists.converted_once
    def convert(schema: Any, agent_arguments: bool) -> dict[str, Any]:
        calls.append(schema["name"])
        if schema["name"] == "bad":
            raise ValueError("no translation")
        return {"name": schema["name"], "agent_arguments": agent_arguments}

    bad = {"name": "bad"}
    for _ in range(2):
        with pytest.raises(ValueError):
            convert(bad, True)
    assert calls == ["bad", "bad"]

    schemas = [{"name": f"tool-{i}"} for i in range(tool_lists.KEPT + 1)]
    made = [convert(s, True) for s in schemas]
    assert convert(schemas[-1], True) is made[-1]  # kept after the store started again
    assert len(calls) == 2 + len(schemas)
    assert convert(schemas[0], True) is not made[0]  # forgotten when the store was full, made again
    assert calls[-1] == "tool-0"
