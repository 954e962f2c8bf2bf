"""Gemini wire translation, both ways: generateContent bodies built, responses and batch results parsed
back, and tools' JSON schemas as Gemini schemas (or refused, saying why)."""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.domain.messages import Image, Message, Role, ToolCall
from nightshift.emulator.gemini_checks import check_body, check_signatures
from nightshift.providers.base import (
    FIRST_USER_TURN,
    MISSING_TOOL_RESULT,
    ModelRequest,
    OutcomeStatus,
    TextDelta,
    ToolCallDelta,
)
from nightshift.providers.google_ai import wire
from nightshift.providers.google_ai.schema import UnsupportedSchema, gemini_schema, unsupported
from support.messages import msg

SEND: dict[str, Any] = {
    "name": "send_message",
    "description": "Send a message.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
}
NOTE = {"name": "note", "description": "Take a note.", "parameters": {"type": "object", "properties": {}}}


def request(*messages: Message, **fields: Any) -> ModelRequest:
    return ModelRequest(model="gemini-2.5-flash", system="You are Sam.", messages=messages, tools=(SEND,), **fields)


def calls(*pairs: tuple[str, str]) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(id=i, name=name, arguments='{"message": "hi"}') for i, name in pairs)


def test_body_has_system_instruction_declarations_and_a_required_call() -> None:
    body = wire.build_request(request(msg(Role.USER, "hi"), temperature=0.2, max_tokens=100))

    assert body["systemInstruction"] == {"parts": [{"text": "You are Sam."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert body["generationConfig"] == {"maxOutputTokens": 100, "temperature": 0.2}
    (declaration,) = body["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "send_message"
    parameters = declaration["parameters"]
    assert parameters["type"] == "OBJECT"
    assert list(parameters["properties"]) == ["inner_thoughts", "message", "request_heartbeat"]
    assert parameters["properties"]["request_heartbeat"]["type"] == "BOOLEAN"
    assert parameters["required"] == ["inner_thoughts", "message", "request_heartbeat"]


def test_forced_and_optional_calls_and_letta_v1_thoughts() -> None:
    forced = wire.build_request(request(msg(Role.USER, "hi"), forced_tool="send_message"))
    assert forced["toolConfig"]["functionCallingConfig"] == {"mode": "ANY", "allowedFunctionNames": ["send_message"]}
    free = wire.build_request(request(msg(Role.USER, "hi"), require_tool_call=False, agent_arguments=False))
    assert free["toolConfig"]["functionCallingConfig"] == {"mode": "AUTO"}
    assert free["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
    assert list(free["tools"][0]["functionDeclarations"][0]["parameters"]["properties"]) == ["message"]
    # A tool without arguments goes without parameters: Gemini refuses an OBJECT with no properties.
    bare = wire.build_request(ModelRequest(model="m", system="", messages=(), tools=(NOTE,), agent_arguments=False))
    assert bare["tools"][0]["functionDeclarations"] == [{"name": "note", "description": "Take a note."}]
    assert "systemInstruction" not in bare


def test_thought_signatures_come_back_with_their_calls_and_gemini_3_gets_a_stand_in() -> None:
    response = wire.parse_response(
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": "c2ln"},
                            {"functionCall": {"name": "b", "args": {}}},
                        ],
                    }
                }
            ],
            "responseId": "r",
        }
    )
    assert [c.signature for c in response.tool_calls] == ["c2ln", None]
    assert ToolCall.from_json(response.tool_calls[0].to_json()) == response.tool_calls[0]  # as stored
    streamed = wire.StreamAssembler()
    streamed.feed(
        {"candidates": [{"content": {"parts": [{"functionCall": {"name": "a"}, "thoughtSignature": "c2ln"}]}}]}
    )
    assert [c.signature for c in streamed.response().tool_calls] == ["c2ln"]

    answered = [msg(Role.TOOL, "ok", tool_call_id=c.id) for c in response.tool_calls]
    history = [msg(Role.USER, "hi"), msg(Role.ASSISTANT, tool_calls=response.tool_calls), *answered]
    unsigned = [msg(Role.USER, "hi"), msg(Role.ASSISTANT, tool_calls=calls(("c1", "a"), ("c2", "b"))), *answered]

    def signatures(contents: list[dict[str, Any]]) -> list[str | None]:
        return [p.get("thoughtSignature") for p in contents[1]["parts"]]

    assert signatures(wire.to_contents(history)) == ["c2ln", None]
    assert signatures(wire.to_contents(unsigned)) == [None, None]  # Gemini 2.5 takes calls unsigned
    assert signatures(wire.to_contents(unsigned, signed=True)) == [wire.UNSIGNED, None]
    assert wire.signs_calls("gemini-3-flash-preview") and wire.signs_calls("gemini-10-pro")
    assert not wire.signs_calls("gemini-2.5-pro")
    body = wire.build_request(ModelRequest(model="gemini-3-flash-preview", system="s", messages=tuple(unsigned)))
    check_signatures(body, "gemini-3-flash-preview")  # the stand-in is what Gemini 3 takes


def test_several_calls_are_answered_in_their_order_at_the_start_of_the_next_user_turn() -> None:
    contents = wire.to_contents(
        [
            msg(Role.USER, "hello"),
            msg(Role.ASSISTANT, "Let me look.", reasoning="Two things.", tool_calls=calls(("c1", "a"), ("c2", "b"))),
            msg(Role.TOOL, "B done", tool_call_id="c2"),
            msg(Role.TOOL, "A failed", tool_call_id="c1", is_error=True),
            msg(Role.USER, '{"type": "heartbeat"}'),
        ]
    )

    assert [c["role"] for c in contents] == ["user", "model", "user"]
    model_parts = contents[1]["parts"]
    assert model_parts[0] == {"text": "Let me look."}
    assert model_parts[1] == {"functionCall": {"name": "a", "args": {"inner_thoughts": "Two things.", "message": "hi"}}}
    assert model_parts[2] == {"functionCall": {"name": "b", "args": {"message": "hi"}}}
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "a", "response": {"error": "A failed"}}},
        {"functionResponse": {"name": "b", "response": {"output": "B done"}}},
        {"text": '{"type": "heartbeat"}'},
    ]


def test_history_repairs_gemini_would_refuse() -> None:
    contents = wire.to_contents(
        [
            msg(Role.ASSISTANT, "Hello, I am Sam."),  # the model first: a user turn goes before it
            msg(Role.TOOL, "stale", tool_call_id="gone"),  # answers no call of the turn before: text
            msg(Role.USER, "hi"),
            msg(Role.ASSISTANT, tool_calls=calls(("c1", "send_message"))),  # never answered
            msg(Role.USER, "still there?"),
        ]
    )

    assert contents[0] == {"role": "user", "parts": [{"text": FIRST_USER_TURN}]}
    assert contents[1] == {"role": "model", "parts": [{"text": "Hello, I am Sam."}]}
    assert contents[2] == {"role": "user", "parts": [{"text": "Tool result: stale"}, {"text": "hi"}]}
    missing = {"functionResponse": {"name": "send_message", "response": {"error": MISSING_TOOL_RESULT}}}
    assert contents[4] == {"role": "user", "parts": [missing, {"text": "still there?"}]}
    trailing = wire.to_contents([msg(Role.USER, "hi"), msg(Role.ASSISTANT, tool_calls=calls(("c9", "x")))])
    assert trailing[-1] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "x", "response": {"error": MISSING_TOOL_RESULT}}}],
    }


def test_images_and_malformed_arguments() -> None:
    image = Image(media_type="image/png", data="AAAA")
    linked = Image(url="https://example.com/cat.jpg")
    bad = ToolCall(id="c1", name="send_message", arguments="{not json")
    contents = wire.to_contents(
        [
            msg(Role.USER, "look", images=(image, linked)),
            msg(Role.ASSISTANT, reasoning="hm", tool_calls=(bad,)),
            msg(Role.TOOL, "error", tool_call_id="c1", is_error=True),
        ]
    )

    assert contents[0]["parts"][1:] == [
        {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
    ]
    assert contents[1]["parts"] == [
        {"functionCall": {"name": "send_message", "args": {"inner_thoughts": "hm", "arguments": "{not json"}}}
    ]


def answer(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP"}],
        "usageMetadata": {
            "promptTokenCount": 1200,
            "cachedContentTokenCount": 1000,
            "candidatesTokenCount": 40,
            "thoughtsTokenCount": 60,
        },
        "modelVersion": "gemini-2.5-flash",
        **extra,
    }


def test_response_with_several_calls_thoughts_and_usage() -> None:
    body = answer(
        {"text": "Planning the reply.", "thought": True},
        {"functionCall": {"name": "note", "args": {"inner_thoughts": "Note first.", "text": "x"}}},
        {
            "functionCall": {
                "name": "send_message",
                "args": {"inner_thoughts": "Then answer.", "message": "Hi", "request_heartbeat": True},
            }
        },
        responseId="resp-1",
    )

    response = wire.parse_response(body)

    assert [c.name for c in response.tool_calls] == ["note", "send_message"]
    assert response.tool_calls[1].arguments == '{"message": "Hi"}'
    assert response.reasoning == "Note first.\nThen answer."
    assert response.request_heartbeat is True
    assert response.text is None
    assert response.stop_reason == "STOP"
    assert response.model == "gemini-2.5-flash"
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (200, 1000, 100)
    # Gemini sends no call ids: they are made from the response, the same when it is read again.
    ids = [c.id for c in response.tool_calls]
    assert len(set(ids)) == 2
    assert [c.id for c in wire.parse_response(body).tool_calls] == ids
    assert ids != [c.id for c in wire.parse_response({**body, "responseId": "resp-2"}).tool_calls]


def test_letta_v1_answer_takes_the_thoughts_as_reasoning_and_text_as_the_answer() -> None:
    response = wire.parse_response(answer({"text": "User greets.", "thought": True}, {"text": "Hello!"}))

    assert response.reasoning == "User greets."
    assert response.text == "Hello!"
    assert response.tool_calls == ()
    blocked = wire.parse_response({"promptFeedback": {"blockReason": "SAFETY"}})
    assert (blocked.text, blocked.stop_reason, blocked.tool_calls) == (None, "SAFETY", ())


def test_batch_results_and_sdk_arguments() -> None:
    key, done = wire.parse_result("item-1", {"key": "item-1", "response": answer({"text": "ok"})})
    assert (key, done.status) == ("item-1", OutcomeStatus.SUCCEEDED)
    assert done.response is not None and done.response.text == "ok"
    key, failed = wire.parse_result(
        "item-2", {"error": {"code": 400, "message": "bad part", "status": "INVALID_ARGUMENT"}}
    )
    assert failed.status is OutcomeStatus.ERRORED
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == ("invalid_request_error", "bad part")
    limited = wire.parse_result("item-3", {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}})[1]
    assert limited.error is not None and limited.error.type == "rate_limit_error"
    # A google.rpc.Status as the batch gives it: the RPC code alone names what happened.
    unavailable = wire.parse_result("item-4", {"error": {"code": 14, "message": "try later"}})[1]
    assert unavailable.error is not None and unavailable.error.type == "overloaded_error"
    refused = wire.parse_result("item-5", {"error": {"code": 3, "message": "bad"}})[1]
    assert refused.error is not None and refused.error.type == "invalid_request_error"
    # Requests an expired or cancelled batch never ran end as the batch did, whichever code says so.
    unrun = [{"code": 4}, {"code": 504, "message": "expired"}, {"code": 1}, {"status": "CANCELLED", "code": 499}]
    statuses = [wire.parse_result("item", {"error": error})[1].status for error in unrun]
    assert statuses == [OutcomeStatus.EXPIRED, OutcomeStatus.EXPIRED, OutcomeStatus.CANCELED, OutcomeStatus.CANCELED]

    body = wire.build_request(request(msg(Role.USER, "hi")))
    arguments = wire.sdk_arguments(body)
    assert arguments["contents"] == body["contents"]
    assert arguments["config"]["systemInstruction"] == body["systemInstruction"]
    assert arguments["config"]["toolConfig"] == body["toolConfig"]
    assert arguments["config"]["maxOutputTokens"] == 4096


def test_stream_chunks_fold_into_the_same_answer() -> None:
    assembler = wire.StreamAssembler()
    chunks: list[dict[str, Any]] = [
        {"candidates": [{"content": {"parts": [{"text": "Thinking", "thought": True}]}}], "responseId": "r"},
        {"candidates": [{"content": {"parts": [{"text": "Hel"}]}}], "responseId": "r"},
        {"candidates": [{"content": {"parts": [{"text": "lo"}]}}], "responseId": "r"},
        {
            "candidates": [
                {
                    "content": {"parts": [{"functionCall": {"name": "send_message", "args": {"message": "x"}}}]},
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5},
            "responseId": "r",
        },
    ]

    deltas = [d for chunk in chunks for d in assembler.feed(chunk)]
    response = assembler.response()

    assert deltas[:2] == [TextDelta(text="Hel"), TextDelta(text="lo")]
    call = deltas[2]
    assert isinstance(call, ToolCallDelta)
    assert (call.index, call.name, call.arguments) == (0, "send_message", '{"message": "x"}')
    assert response.text == "Hello"
    assert response.reasoning == "Thinking"
    assert [c.id for c in response.tool_calls] == [call.id]
    assert response.usage.output_tokens == 5
    assert response.stop_reason == "STOP"


def test_schema_translation() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "when": {"type": ["string", "null"], "format": "date-time", "description": "When."},
            "kind": {"const": "todo"},
            "tags": {"type": "array", "items": {"type": "string", "format": "uri"}, "uniqueItems": True},
            "owner": {"$ref": "#/$defs/Person"},
            "size": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "shape": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        },
        "required": ["kind"],
        "$defs": {"Person": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }

    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "when": {"type": "STRING", "format": "date-time", "description": "When.", "nullable": True},
            "kind": {"enum": ["todo"], "type": "STRING", "format": "enum"},
            "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
            "owner": {"type": "OBJECT", "properties": {"name": {"type": "STRING"}}},
            "size": {"type": "INTEGER", "nullable": True},
            "shape": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
        },
        "required": ["kind"],
    }


def test_what_json_schema_allows_and_gemini_refuses_is_left_out() -> None:
    schema = {
        "type": "object",
        "properties": {"options": {"type": "object", "properties": {}, "required": ["mode"]}, "n": {"type": "integer"}},
        "required": ["n", "gone"],
    }

    translated = gemini_schema(schema)

    assert translated == {
        "type": "OBJECT",
        "properties": {"options": {"type": "OBJECT"}, "n": {"type": "INTEGER"}},
        "required": ["n"],
    }
    declaration = {"name": "configure", "description": "", "parameters": translated}
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [declaration]}],
    }
    check_body(body)  # what Gemini refuses, the emulator refuses: this raises nothing


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"x": {"not": {"type": "string"}}}}, "parameters.x: 'not'"),
        ({"type": "object", "properties": {"n": {"enum": [1, 2]}}}, "parameters.n: an enum of values"),
        ({"type": "object", "properties": {"p": {"type": "array", "items": [{}, {}]}}}, "tuple arrays"),
        ({"type": "object", "properties": {"v": {"type": ["string", "integer"]}}}, "several types"),
        (
            {"type": "object", "properties": {"t": {"$ref": "#/$defs/T"}}, "$defs": {"T": {"$ref": "#/$defs/T"}}},
            "a recursive reference",
        ),
        ({"type": "object", "properties": {"r": {"$ref": "https://example.com/x.json"}}}, "does not point into"),
        ({"type": "object", "patternProperties": {"^x": {}}}, "'patternProperties'"),
        ({"type": "object", "properties": {"a": {"allOf": [{}, {}]}}}, "'allOf' of several"),
    ],
)
def test_schemas_gemini_cannot_take_are_refused_saying_where_and_what(schema: dict[str, Any], problem: str) -> None:
    with pytest.raises(UnsupportedSchema) as caught:
        gemini_schema(schema)
    assert problem in str(caught.value)
    assert unsupported(schema) == str(caught.value)
    assert unsupported(SEND["parameters"]) is None
