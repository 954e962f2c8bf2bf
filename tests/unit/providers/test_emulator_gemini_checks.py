"""What the emulated Gemini API refuses in a generateContent body and a batch file line, with Google's words."""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.emulator.errors import ApiError
from nightshift.emulator.gemini_checks import (
    BAD_FUNCTION_NAME,
    CALL_AFTER_USER,
    RESPONSE_AFTER_CALL,
    SAME_COUNT,
    check_batch_line,
    check_body,
    check_signatures,
)

PARAMETERS = {"type": "OBJECT", "properties": {"message": {"type": "STRING"}}, "required": ["message"]}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts) or [{"text": "hi"}]}


def model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def call(name: str = "send_message") -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": {"message": "hi"}}}


def answer(name: str = "send_message") -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": {"output": "ok"}}}


def declaration(name: str = "send_message", **fields: Any) -> dict[str, Any]:
    return {"name": name, "description": "Send.", "parameters": PARAMETERS, **fields}


def body(*contents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"contents": list(contents) or [user()], **fields}


def with_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    return body(tools=[{"functionDeclarations": [declaration(parameters=parameters)]}])


def refusal(value: Any) -> str:
    with pytest.raises(ApiError) as caught:
        check_body(value)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value.message


def test_a_full_function_calling_body_passes_unchanged() -> None:
    request = body(
        user(),
        model({"text": "thinking", "thought": True}, call(), call()),
        user(answer(), answer()),
        model({"text": "done"}),
        user({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}, {"text": "and this?"}),
        **{"model": "models/gemini-2.5-flash"},
        systemInstruction={"parts": [{"text": "You are Sam."}]},
        tools=[{"functionDeclarations": [declaration(), declaration("note", parameters=None)]}, {"googleSearch": {}}],
        toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["note"]}},
        generationConfig={
            "maxOutputTokens": 100,
            "temperature": 2,
            "thinkingConfig": {"includeThoughts": True, "thinkingBudget": -1},
        },
    )

    assert check_body(request) is request


def test_snake_case_names_single_objects_and_lower_case_enums_are_read_as_google_reads_them() -> None:
    request: dict[str, Any] = {
        "contents": {"role": "user", "parts": {"text": "hi"}},
        "system_instruction": {"parts": {"text": "You are Sam."}},
        "tools": [{"function_declarations": [{"name": "f", "parameters": {"type": "object", "properties": {}}}]}],
        "tool_config": {"function_calling_config": {"mode": "any", "allowed_function_names": ["f"]}},
        "generation_config": {"max_output_tokens": "100"},
    }

    assert refusal(request) == (
        "* GenerateContentRequest.tools[0].function_declarations[0].parameters.properties: "
        "should be non-empty for OBJECT type\n"
    )
    request["tools"][0]["function_declarations"][0]["parameters"]["properties"] = {"x": {"type": "string"}}
    checked = check_body(request)
    assert checked["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert checked["systemInstruction"] == {"parts": [{"text": "You are Sam."}]}
    assert checked["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}
    assert checked["tools"][0]["functionDeclarations"][0]["parameters"]["properties"]["x"] == {"type": "STRING"}


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ([], 'Invalid JSON payload received. Unknown name "": Root element must be a message.'),
        (body(foo=1), 'Invalid JSON payload received. Unknown name "foo": Cannot find field.'),
        (
            body(generationConfig={"max_tokens": 5}),
            """Invalid JSON payload received. Unknown name "max_tokens" at 'generation_config': Cannot find field.""",
        ),
        (
            body(user({"text": "hi", "cache_control": {}})),
            """Invalid JSON payload received. Unknown name "cache_control" at 'contents[0].parts[0]': """
            "Cannot find field.",
        ),
        (
            body(tools=[{"functionDeclarations": [declaration(strict=True)]}]),
            """Invalid JSON payload received. Unknown name "strict" at 'tools[0].function_declarations[0]': """
            "Cannot find field.",
        ),
        (
            body(toolConfig={"functionCallingConfig": {"mode": "ANY", "stream_function_call_arguments": True}}),
            """Invalid JSON payload received. Unknown name "stream_function_call_arguments" at """
            """'tool_config.function_calling_config': Cannot find field.""",
        ),
        (
            body(generationConfig={"thinkingConfig": {"budget": 5}}),
            """Invalid JSON payload received. Unknown name "budget" at 'generation_config.thinking_config': """
            "Cannot find field.",
        ),
        (
            body(tools=[{"retrieval": {}}]),
            """Invalid JSON payload received. Unknown name "retrieval" at 'tools[0]': Cannot find field.""",
        ),
        (
            body(generationConfig="hot"),
            "Invalid value at 'generation_config' "
            '(type.googleapis.com/google.ai.generativelanguage.v1beta.GenerationConfig), "hot"',
        ),
    ],
    ids=[
        "not an object",
        "top level",
        "generation config",
        "part",
        "declaration",
        "calling config",
        "thinking",
        "vertex-only tool",
        "not a message",
    ],
)
def test_unknown_names_and_values_of_the_wrong_kind(request_body: Any, message: str) -> None:
    assert refusal(request_body) == message


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("$ref", "#/$defs/x"),
        ("$defs", {}),
        ("additionalProperties", False),
        ("oneOf", []),
        ("allOf", []),
        ("const", "x"),
        ("not", {}),
    ],
)
def test_json_schema_keywords_gemini_does_not_have(keyword: str, value: Any) -> None:
    schema = {"type": "OBJECT", "properties": {"a": {"type": "STRING", keyword: value}}}

    assert refusal(with_parameters(schema)) == (
        f"""Invalid JSON payload received. Unknown name "{keyword}" at """
        """'tools[0].function_declarations[0].parameters.properties[0].value': Cannot find field."""
    )


def test_parameters_json_schema_takes_plain_json_schema_but_not_with_parameters() -> None:
    schema = {"type": "object", "properties": {"a": {"const": 1}}, "additionalProperties": False, "$defs": {}}
    plain = body(tools=[{"functionDeclarations": [declaration(parameters=None, parametersJsonSchema=schema)]}])
    both = body(tools=[{"functionDeclarations": [declaration(parametersJsonSchema=schema)]}])
    text = body(tools=[{"functionDeclarations": [declaration(parameters=None, parametersJsonSchema="{}")]}])

    assert check_body(plain) is plain
    assert "parameters and parameters_json_schema cannot both be set" in refusal(both)
    assert "function_declarations[0].parameters_json_schema: must be a JSON Schema object" in refusal(text)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"type": "OBJECT", "properties": {}},
            "tools[0].function_declarations[0].parameters.properties: should be non-empty for OBJECT type",
        ),
        (
            {"type": "OBJECT", "properties": {"a": {"type": "object", "properties": {}}}},
            "parameters.properties[a].properties: should be non-empty for OBJECT type",
        ),
        (
            {"type": "STRING", "properties": {"a": {"type": "STRING"}}},
            "parameters.properties: only allowed for OBJECT type",
        ),
        (
            {"type": "OBJECT", "properties": {"a": {"type": "STRING"}}, "required": ["a", "b"]},
            "parameters.required[1]: property is not defined",
        ),
        (
            {"type": "OBJECT", "properties": {"a": {"type": "INTEGER", "enum": ["1", "2"]}}},
            "parameters.properties[a].enum: only allowed for STRING type",
        ),
        (
            {"type": "OBJECT", "properties": {"a": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["x", 2]}}}},
            "Invalid value at 'tools[0].function_declarations[0].parameters.properties[a].items.enum[1]' "
            "(TYPE_STRING), 2",
        ),
        (
            {"type": "OBJECT", "properties": {"a": {"type": "enum"}}},
            "Invalid value at 'tools[0].function_declarations[0].parameters.properties[0].value.type' "
            '(type.googleapis.com/google.ai.generativelanguage.v1beta.Type), "enum"',
        ),
    ],
    ids=[
        "empty properties",
        "nested empty properties",
        "properties on a string",
        "required",
        "enum on a number",
        "enum value",
        "type",
    ],
)
def test_function_parameter_schemas(parameters: dict[str, Any], message: str) -> None:
    assert message in refusal(with_parameters(parameters))


def test_schema_types_in_any_case_and_any_of_pass() -> None:
    schema = {
        "type": "object",
        "properties": {
            "when": {"anyOf": [{"type": "String", "format": "date-time"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a"]}, "maxItems": "3"},
            "free": {"type": "OBJECT"},
        },
        "required": ["when"],
        "propertyOrdering": ["when", "tags", "free"],
    }

    check_body(with_parameters(schema))


@pytest.mark.parametrize(
    ("declarations", "message"),
    [
        ([declaration("get weather")], "function_declarations[0].name: " + BAD_FUNCTION_NAME),
        ([declaration("9lives")], "function_declarations[0].name: " + BAD_FUNCTION_NAME),
        ([declaration("f" * 65)], "function_declarations[0].name: " + BAD_FUNCTION_NAME),
        ([declaration(), declaration()], "function_declarations[1].name: Duplicate function declaration"),
    ],
    ids=["space", "digit first", "65 characters", "twice"],
)
def test_function_names(declarations: list[dict[str, Any]], message: str) -> None:
    assert message in refusal(body(tools=[{"functionDeclarations": declarations}]))


def test_names_google_allows_pass() -> None:
    names = ["_private", "ns.tool:v1-beta", "f" * 64]

    check_body(body(tools=[{"functionDeclarations": [declaration(name) for name in names]}]))


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        ([], "* GenerateContentRequest.contents: contents is not specified\n"),
        (
            [user(), {"role": "model", "parts": []}],
            "* GenerateContentRequest.contents[1].parts: contents.parts must not be empty.\n",
        ),
        (
            [user({"thought": True})],
            "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one "
            "initialized field\n",
        ),
        ([{"role": "assistant", "parts": [{"text": "hi"}]}], "Please use a valid role: user, model."),
        ([{"role": "system", "parts": [{"text": "hi"}]}], "Please use a valid role: user, model."),
        ([user({"text": "a", "fileData": {"fileUri": "gs://x"}})], "Oneof field 'data' is already set"),
        (
            [user({"inlineData": {"mimeType": "image/png", "data": "not base64!"}})],
            "Invalid value at 'contents[0].parts[0].inline_data.data' (TYPE_BYTES), \"not base64!\"",
        ),
    ],
    ids=["no contents", "no parts", "no data", "assistant", "system", "two data fields", "bytes"],
)
def test_contents(contents: list[dict[str, Any]], message: str) -> None:
    assert message in refusal({"contents": contents})


def test_missing_contents() -> None:
    assert refusal({"generationConfig": {}}) == "* GenerateContentRequest.contents: contents is not specified\n"


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        ([model(call()), user(answer())], CALL_AFTER_USER),
        ([user(), model({"text": "a"}), model(call()), user(answer())], CALL_AFTER_USER),
        ([user(), user(answer())], RESPONSE_AFTER_CALL),
        ([user(), model({"text": "a"}), user(answer())], RESPONSE_AFTER_CALL),
        ([user(), model(call(), call()), user(answer())], SAME_COUNT),
        ([user(), model(call()), user(answer(), answer())], SAME_COUNT),
        ([user(), model(call()), user({"text": "never mind"})], SAME_COUNT),
        ([user(), model(call()), model({"text": "a"})], SAME_COUNT),
        ([user(call())], "contents[0]: function call parts can only be in a turn of role model."),
        ([user(), model(answer())], "contents[1]: function response parts can only be in a turn of role user."),
    ],
    ids=[
        "call first",
        "call after a model turn",
        "response after a user turn",
        "response after text",
        "too few responses",
        "too many responses",
        "call answered by text",
        "call followed by model",
        "call in a user turn",
        "response in a model turn",
    ],
)
def test_function_calling_turn_order(contents: list[dict[str, Any]], message: str) -> None:
    assert message in refusal({"contents": contents})


def test_turns_the_api_takes() -> None:
    unanswered_at_the_end = body(user(), model(call()))
    text_after_responses = body(user(), model(call()), user(answer(), {"text": "also"}), model(call()), user(answer()))
    no_role = body({"parts": [{"text": "hi"}]})

    for request in (unanswered_at_the_end, text_after_responses, no_role):
        assert check_body(request) is request


def test_system_instruction_holds_text_only() -> None:
    image = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}

    message = refusal(body(systemInstruction={"parts": [{"text": "S"}, image]}))

    assert message == (
        "* GenerateContentRequest.system_instruction.parts[1]: system_instruction can only hold text parts.\n"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"mode": "SOMETIMES"},
            '(type.googleapis.com/google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), "SOMETIMES"',
        ),
        (
            {"mode": "AUTO", "allowedFunctionNames": ["send_message"]},
            "allowed_function_names: allowed_function_names may only be set when mode is ANY or VALIDATED.",
        ),
        ({"allowedFunctionNames": ["send_message"]}, "may only be set when mode is ANY or VALIDATED"),
        ({"mode": "ANY", "allowedFunctionNames": ["nope"]}, "allowed_function_names[0]: 'nope' is not the name of a"),
    ],
    ids=["mode", "names with AUTO", "names without a mode", "undeclared name"],
)
def test_tool_config(config: dict[str, Any], message: str) -> None:
    request = body(tools=[{"functionDeclarations": [declaration()]}], toolConfig={"functionCallingConfig": config})

    assert message in refusal(request)


@pytest.mark.parametrize("mode", ["AUTO", "any", "NONE", "VALIDATED"])
def test_calling_modes(mode: str) -> None:
    tools = [{"functionDeclarations": [declaration()]}]

    check_body(body(tools=tools, toolConfig={"functionCallingConfig": {"mode": mode}}))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"maxOutputTokens": 0}, "generation_config.max_output_tokens: max_output_tokens must be at least 1."),
        ({"temperature": 2.5}, "generation_config.temperature: temperature must be in the range [0.0, 2.0]."),
        ({"temperature": -0.1}, "temperature must be in the range [0.0, 2.0]."),
        ({"thinkingConfig": {"thinkingBudget": -2}}, "thinking_config.thinking_budget: thinking_budget must be -1"),
        ({"temperature": "hot"}, "Invalid value at 'generation_config.temperature' (TYPE_FLOAT), \"hot\""),
    ],
    ids=["no tokens", "too hot", "below zero", "budget", "not a number"],
)
def test_generation_config(config: dict[str, Any], message: str) -> None:
    assert message in refusal(body(generationConfig=config))


def test_batch_lines() -> None:
    seen: set[str] = set()
    request = body()

    assert check_batch_line({"key": "a", "request": request}, seen) == ("a", request)
    for line, message in [
        ({"request": request}, "the line has no 'key'"),
        ({"key": 1, "request": request}, "must be a string, not 1"),
        ({"key": "a", "request": request}, "Duplicate key 'a'"),
        ("a line", "must be an object"),
    ]:
        with pytest.raises(ApiError) as caught:
            check_batch_line(line, seen)
        assert caught.value.status == 400 and message in caught.value.message
    assert seen == {"a"}


def test_gemini_3_wants_the_current_turns_first_calls_signed() -> None:
    signed = {**call(), "thoughtSignature": "c2ln"}
    earlier_unsigned = body(user(), model(call()), user(answer()), model({"text": "done"}), user())
    current = body(user(), model(signed, call()), user(answer(), answer()), model(call()), user(answer()))

    check_signatures(earlier_unsigned, "gemini-3-flash-preview")  # before the last user message: not checked
    check_signatures(current, "gemini-2.5-flash")  # a model before 3 takes any
    with pytest.raises(ApiError) as caught:
        check_signatures(current, "gemini-3-flash-preview")
    assert caught.value.status == 400 and "contents[3].parts[0]" in caught.value.message
    assert "thought_signature" in caught.value.message
    fixed = body(user(), model(signed, call()), user(answer(), answer()), model(signed), user(answer()))
    check_signatures(fixed, "models/gemini-3-flash-preview")
