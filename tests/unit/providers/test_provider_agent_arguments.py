"""inner_thoughts / request_heartbeat: added to schemas, stripped from calls, put back for history."""

from __future__ import annotations

from nightshift.providers.agent_arguments import split_agent_arguments, with_agent_arguments, with_reasoning


def test_schema_gets_both_arguments_without_changing_the_input() -> None:
    original = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    schema = with_agent_arguments(original)

    assert list(schema["properties"]) == ["inner_thoughts", "x", "request_heartbeat"]
    assert schema["required"] == ["inner_thoughts", "x", "request_heartbeat"]
    assert original == {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def test_schema_without_parameters() -> None:
    schema = with_agent_arguments(None)

    assert schema["type"] == "object"
    assert schema["required"] == ["inner_thoughts", "request_heartbeat"]


def test_existing_agent_arguments_are_not_duplicated() -> None:
    schema = with_agent_arguments(
        {"properties": {"request_heartbeat": {"type": "string"}}, "required": ["request_heartbeat"]}
    )

    assert schema["required"] == ["inner_thoughts", "request_heartbeat"]
    assert schema["properties"]["request_heartbeat"]["type"] == "boolean"


def test_split_from_dict_and_text() -> None:
    from_dict = split_agent_arguments({"inner_thoughts": "why", "a": 1, "request_heartbeat": True})
    from_text = split_agent_arguments('{"a": 1, "request_heartbeat": false}')

    assert (from_dict.arguments, from_dict.inner_thoughts, from_dict.request_heartbeat) == ('{"a": 1}', "why", True)
    assert (from_text.arguments, from_text.inner_thoughts, from_text.request_heartbeat) == ('{"a": 1}', None, False)


def test_split_keeps_malformed_text() -> None:
    for raw in ("{broken", "[1]", '"text"', '"{\\"request_heartbeat\\": true}"'):
        split = split_agent_arguments(raw)
        assert (split.arguments, split.inner_thoughts, split.request_heartbeat) == (raw, None, False)


def test_empty_arguments_are_an_empty_object() -> None:
    assert split_agent_arguments("").arguments == "{}"


def test_reasoning_goes_back_first() -> None:
    assert list(with_reasoning('{"a": 1}', "why") or {}) == ["inner_thoughts", "a"]
    assert with_reasoning('{"a": 1}', None) == {"a": 1}
    assert with_reasoning("not json", "why") is None
