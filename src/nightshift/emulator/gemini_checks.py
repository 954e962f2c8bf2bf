"""What the Gemini API's ``generateContent`` refuses, as pure checks with Google's words.

``check_body`` takes a request body (a normal call's, an inline batch request's ``request`` or a
batch file line's ``request``) in two steps, as Google's front end does:

1. It is read as the ``GenerateContentRequest`` proto. Field names may be camelCase or snake_case,
   a single object stands for a one-item list of messages and enum names are read whatever their
   case, as Google's JSON reader allows (its docs' own curl examples mix ``system_instruction``
   with ``generationConfig``). A name the message does not have is refused:
   ``Invalid JSON payload received. Unknown name "foo" at 'generation_config': Cannot find field.``
   (paths in snake_case, a map entry as ``properties[1].value``), and so is a value of the wrong
   kind (``Invalid value at '...type' (type.googleapis.com/...Type), "enum"``), an unknown enum
   name (schema ``type``, function calling ``mode``) and ``inlineData.data`` that is not base64.
   The fields are the SDK's (google-genai, what it sends to the Gemini API rather than Vertex).
   Schema fields are the Gemini API's OpenAPI subset, so ``$ref``, ``$defs``,
   ``additionalProperties``, ``oneOf``, ``allOf``, ``const`` and ``not`` in ``parameters`` are
   unknown names; ``parametersJsonSchema``, ``args``, ``response``, ``labels`` and the configs of
   the built-in tools, speech and images are free JSON, not looked into.
2. It is validated, each refusal ``* GenerateContentRequest.<path>: <problem>`` as Google writes them:
   no ``contents``; a content with no parts; a part with no data field; a role other than ``user``
   or ``model`` (or unset); function names outside ``^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$``; an OBJECT
   schema with empty ``properties``, ``properties`` on another type, ``required`` naming no
   property, ``enum`` on a type other than STRING; the function-calling turn order.

Where the rules come from. Observed (the API's own messages, as users have reported them): the
unknown-name, invalid-value and ``Root element must be a message`` parse errors; ``contents is not
specified``; ``contents.parts must not be empty``; ``required oneof field 'data'``; ``Please use a
valid role: user, model.``; the function name rule; the four schema rules above; and the three
turn-order messages: a function response turn must come right after a function call turn, with as
many responses as there were calls, and a function call turn right after a user turn or a
function response turn. Documented (the function-calling guide): a model turn's calls are answered
by their responses in the next turn, a ``user`` one. Assumed, with our own wording: that a call
turn followed by anything but its responses is refused (an unanswered call turn at the very end
is taken); a ``functionCall`` in a user turn or a ``functionResponse`` in a model turn; two data
fields in one part; non-text parts in ``systemInstruction``; a function declared twice; both
``parameters`` and ``parametersJsonSchema``; ``parametersJsonSchema`` not an object;
``allowedFunctionNames`` with a mode other than ANY or VALIDATED (the SDK documents both as taking
it) or naming no declared function; ``maxOutputTokens`` below 1, ``temperature`` outside [0, 2],
``thinkingBudget`` below -1 (-1 is dynamic, 0 off). What we are unsure of is taken: a history that
ends with a model turn, text next to function responses, an empty text part, a schema with no
``type`` (except under ``enum``), OBJECT schemas without ``properties``.

``check_signatures`` is the model's rule, apart from the body's: Gemini 3 and later refuse a
request whose current turn (what follows the last user turn that is not only function responses)
holds a model turn whose first function call has no ``thoughtSignature`` (the thought-signatures
guide; the message is ours). Any value is taken, Google's documented stand-in included.

``check_batch_line`` reads one line of a batch's JSONL input file; its request is checked apart,
so that a bad request fails that request alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from nightshift.emulator.errors import ApiError, invalid


def _names(words: str) -> frozenset[str]:
    """A set of field names written as one string, space-separated (the tables stay short)."""
    return frozenset(words.split())


FUNCTION_NAME: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$")
ROLES: Final = ("user", "model")
SCHEMA_TYPES: Final = _names("TYPE_UNSPECIFIED STRING NUMBER INTEGER BOOLEAN ARRAY OBJECT NULL")
CALLING_MODES: Final = _names("MODE_UNSPECIFIED AUTO ANY NONE VALIDATED")
# The modes whose calls ``allowedFunctionNames`` narrows.
NAMING_MODES: Final = ("ANY", "VALIDATED")
_PROTO: Final = "type.googleapis.com/google.ai.generativelanguage.v1beta."
_BASE64: Final = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
# The fields of the ``data`` oneof of a Part: exactly one is set.
_DATA: Final = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)
_DATA_NAMES: Final = frozenset(_DATA)
CALL_AFTER_USER: Final = (
    "Please ensure that function call turn comes immediately after a user turn or after a function response turn."
)
_VERSION: Final = re.compile(r"gemini-(\d+)")
RESPONSE_AFTER_CALL: Final = "Please ensure that function response turn comes immediately after a function call turn."
SAME_COUNT: Final = (
    "Please ensure that the number of function response parts is equal to the number of function call parts "
    "of the function call turn."
)
BAD_FUNCTION_NAME: Final = (
    "Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), "
    "underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64."
)

Shape = Literal["one", "many", "map"]


@dataclass(frozen=True, slots=True)
class _Message:
    """A proto message as the JSON reader knows it: its fields and which of them hold messages."""

    proto: str  # the type's name, as parse errors give it
    fields: frozenset[str]  # camelCase
    children: Mapping[str, tuple[str, Shape]] = field(default_factory=dict)  # field -> (message, shape)


_MESSAGES: Final = {
    "request": _Message(
        "GenerateContentRequest",
        _names(
            "model contents systemInstruction tools toolConfig safetySettings generationConfig "
            "cachedContent labels serviceTier store continuationToken"
        ),
        {
            "contents": ("content", "many"),
            "systemInstruction": ("content", "one"),
            "tools": ("tool", "many"),
            "toolConfig": ("toolConfig", "one"),
            "safetySettings": ("safetySetting", "many"),
            "generationConfig": ("generationConfig", "one"),
        },
    ),
    "content": _Message("Content", _names("role parts"), {"parts": ("part", "many")}),
    "part": _Message(
        "Part",
        _DATA_NAMES
        | _names(
            "thought thoughtSignature videoMetadata partMetadata mediaResolution audioTranscription "
            "mediaProcessing speechMetadata documentMetadata spreadsheetMetadata audioMetadata"
        ),
        {
            "inlineData": ("blob", "one"),
            "fileData": ("fileData", "one"),
            "functionCall": ("functionCall", "one"),
            "functionResponse": ("functionResponse", "one"),
            "executableCode": ("executableCode", "one"),
            "codeExecutionResult": ("codeExecutionResult", "one"),
            "videoMetadata": ("videoMetadata", "one"),
        },
    ),
    "blob": _Message("Blob", _names("mimeType data displayName")),
    "fileData": _Message("FileData", _names("mimeType fileUri displayName")),
    "functionCall": _Message("FunctionCall", _names("id name args")),
    "functionResponse": _Message("FunctionResponse", _names("id name response parts scheduling willContinue")),
    "executableCode": _Message("ExecutableCode", _names("id language code")),
    "codeExecutionResult": _Message("CodeExecutionResult", _names("id outcome output")),
    "videoMetadata": _Message("VideoMetadata", _names("startOffset endOffset fps")),
    "tool": _Message(
        "Tool",
        _names(
            "functionDeclarations googleSearch googleSearchRetrieval codeExecution urlContext "
            "fileSearch computerUse googleMaps mcpServers"
        ),
        {"functionDeclarations": ("declaration", "many")},
    ),
    "declaration": _Message(
        "FunctionDeclaration",
        _names("name description parameters parametersJsonSchema response responseJsonSchema behavior"),
        {"parameters": ("schema", "one"), "response": ("schema", "one")},
    ),
    "schema": _Message(
        "Schema",
        _names(
            "type format title description nullable enum maxItems minItems properties required "
            "minProperties maxProperties minLength maxLength pattern example anyOf propertyOrdering "
            "default items minimum maximum"
        ),
        {"properties": ("schema", "map"), "items": ("schema", "one"), "anyOf": ("schema", "many")},
    ),
    "toolConfig": _Message(
        "ToolConfig",
        _names("functionCallingConfig retrievalConfig includeServerSideToolInvocations"),
        {"functionCallingConfig": ("functionCallingConfig", "one")},
    ),
    "functionCallingConfig": _Message("FunctionCallingConfig", _names("mode allowedFunctionNames")),
    "safetySetting": _Message("SafetySetting", _names("category threshold")),
    "generationConfig": _Message(
        "GenerationConfig",
        _names(
            "stopSequences responseMimeType responseSchema responseJsonSchema responseModalities "
            "candidateCount maxOutputTokens temperature topP topK seed presencePenalty "
            "frequencyPenalty responseLogprobs logprobs enableEnhancedCivicAnswers speechConfig "
            "thinkingConfig imageConfig mediaResolution audioTranscriptionConfig "
            "enableAffectiveDialog responseFormat translationConfig"
        ),
        {"thinkingConfig": ("thinkingConfig", "one"), "responseSchema": ("schema", "one")},
    ),
    "thinkingConfig": _Message("ThinkingConfig", _names("includeThoughts thinkingBudget thinkingLevel")),
}
# Enum fields read by name whatever the case (kept upper-cased): (message, field) -> (names, type).
_ENUMS: Final = {
    ("schema", "type"): (SCHEMA_TYPES, "Type"),
    ("functionCallingConfig", "mode"): (CALLING_MODES, "FunctionCallingConfig.Mode"),
}


def check_body(body: Any) -> Mapping[str, Any]:
    """Refuse a ``generateContent`` body the Gemini API would refuse.

    Returns:
        The body; when it used snake_case names, a single object for a list or lower-case enum
        names, a copy in the API's own spelling (camelCase, lists, upper-case enums).

    Raises:
        ApiError: 400 ``INVALID_ARGUMENT`` with Google's message (see the module docstring).
    """
    if not isinstance(body, Mapping):
        raise invalid('Invalid JSON payload received. Unknown name "": Root element must be a message.')
    request = _read(body, "request", "")
    contents: list[Mapping[str, Any]] = request.get("contents") or []
    if not contents:
        raise _refuse("contents", "contents is not specified")
    for i, content in enumerate(contents):
        _check_content(content, f"contents[{i}]")
    _check_turns(contents)
    _check_system(request.get("systemInstruction"))
    names = _check_tools(request.get("tools") or [])
    _check_tool_config(request.get("toolConfig") or {}, names)
    _check_generation(request.get("generationConfig") or {})
    return body if request == body else request


def signs_calls(model: str) -> bool:
    """Whether the model wants its calls' thought signatures back (Gemini 3 and later)."""
    found = _VERSION.match(model.removeprefix("models/"))
    return found is not None and int(found.group(1)) >= 3


def check_signatures(body: Mapping[str, Any], model: str) -> None:
    """Refuse a checked body whose current turn sends a model's function calls back unsigned,
    when the model wants them signed (see the module docstring)."""
    if not signs_calls(model):
        return
    contents: Sequence[Mapping[str, Any]] = body["contents"]
    start = 0
    for i, content in enumerate(contents):
        parts = content.get("parts") or []
        if _role(content) == "user" and any("functionResponse" not in part for part in parts):
            start = i + 1
    for i in range(start, len(contents)):
        parts = contents[i].get("parts") or []
        first = next((j for j, part in enumerate(parts) if "functionCall" in part), None)
        if first is not None and _role(contents[i]) == "model" and not parts[first].get("thoughtSignature"):
            name = parts[first]["functionCall"].get("name")
            raise invalid(
                f"Function call is missing a thought_signature in functionCall parts: function `{name}`, "
                f"contents[{i}].parts[{first}]. See https://ai.google.dev/gemini-api/docs/thought-signatures."
            )


def check_batch_line(line: Any, seen: set[str]) -> tuple[str, Mapping[str, Any]]:
    """The ``(key, request)`` of one line of a batch's JSONL input file (``{"key", "request"}``).

    The request is returned unchecked (``check_body`` it apart: a bad one fails alone). ``seen``
    holds the keys of the lines before; this line's is added.

    Raises:
        ApiError: 400 for a line that is not an object, or whose key is missing, not a string or
            the key of an earlier line (the whole file is refused then; our wording).
    """
    if not isinstance(line, Mapping):
        raise invalid('Each line of a batch input file must be an object {"key": ..., "request": {...}}.')
    key = line.get("key")
    if key is None:
        raise invalid("Each line of a batch input file needs a key: the line has no 'key'.")
    if not isinstance(key, str):
        raise invalid(f"The key of a batch input line must be a string, not {json.dumps(key)}.")
    if key in seen:
        raise invalid(f"Duplicate key {key!r} in the batch input file: keys must be unique.")
    seen.add(key)
    request: Any = line.get("request")  # maybe not an object: check_body refuses that request alone
    return key, request


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _refuse(where: str, problem: str) -> ApiError:
    """A validation error, as Google lists them (one line each)."""
    return invalid(f"* GenerateContentRequest.{where}: {problem}\n")


def _bad_value(where: str, kind: str, value: Any) -> ApiError:
    return invalid(f"Invalid value at '{where}' ({kind}), {json.dumps(value)[:200]}")


def _read(value: Any, kind: str, where: str) -> dict[str, Any]:
    """A message read as Google's JSON reader reads it: unknown names refused, names in camelCase."""
    message = _MESSAGES[kind]
    if not isinstance(value, Mapping):
        raise _bad_value(where, _PROTO + message.proto, value)
    unknown = [key for key in value if _camel(str(key)) not in message.fields]
    if unknown:
        at = f" at '{where}'" if where else ""
        raise invalid(
            "\n".join(f'Invalid JSON payload received. Unknown name "{key}"{at}: Cannot find field.' for key in unknown)
        )
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = _camel(key)
        path = f"{where}.{_snake(name)}" if where else _snake(name)
        child = message.children.get(name)
        enum = _ENUMS.get((kind, name))
        if item is None:
            out[name] = None
        elif child is not None:
            out[name] = _read_child(item, *child, path)
        elif enum is not None:
            out[name] = _enum(item, *enum, path)
        else:
            out[name] = item
    return out


def _read_child(value: Any, kind: str, shape: Shape, where: str) -> Any:
    if shape == "one":
        return _read(value, kind, where)
    if shape == "map":
        if not isinstance(value, Mapping):
            raise _bad_value(where, _PROTO + _MESSAGES[kind].proto, value)
        return {name: _read(item, kind, f"{where}[{i}].value") for i, (name, item) in enumerate(value.items())}
    items = value if isinstance(value, list) else [value]  # one object stands for a list of one
    return [_read(item, kind, f"{where}[{i}]") for i, item in enumerate(items)]


def _enum(value: Any, names: frozenset[str], kind: str, where: str) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # by number: not checked
    if not isinstance(value, str) or value.upper() not in names:
        raise _bad_value(where, _PROTO + kind, value)
    return value.upper()


def _role(content: Mapping[str, Any]) -> str:
    return str(content.get("role") or "user")


def _check_content(content: Mapping[str, Any], where: str) -> None:
    if _role(content) not in ROLES:
        raise invalid("Please use a valid role: user, model.")
    parts: list[Mapping[str, Any]] = content.get("parts") or []
    if not parts:
        raise _refuse(f"{where}.parts", "contents.parts must not be empty.")
    for j, part in enumerate(parts):
        _check_part(part, f"{where}.parts[{j}]")


def _check_part(part: Mapping[str, Any], where: str) -> None:
    data = [name for name in _DATA if part.get(name) is not None]
    if not data:
        raise _refuse(f"{where}.data", "required oneof field 'data' must have one initialized field")
    if len(data) > 1:
        raise invalid(
            f"Invalid JSON payload received. Oneof field 'data' is already set at '{where}'. Cannot set '{data[1]}'."
        )
    blob = part.get("inlineData")
    if blob is not None:
        raw = blob.get("data")
        if not isinstance(raw, str) or not _BASE64.fullmatch(raw):
            raise _bad_value(f"{where}.inline_data.data", "TYPE_BYTES", raw)


def _count(content: Mapping[str, Any] | None, kind: str) -> int:
    return sum(1 for part in (content or {}).get("parts") or [] if part.get(kind) is not None)


def _check_turns(contents: Sequence[Mapping[str, Any]]) -> None:
    """Function calls are a model turn's, answered one for one by the user turn right after it."""
    for i, content in enumerate(contents):
        role = _role(content)
        calls, responses = _count(content, "functionCall"), _count(content, "functionResponse")
        previous = contents[i - 1] if i > 0 else None
        if calls and role != "model":
            raise _refuse(f"contents[{i}]", "function call parts can only be in a turn of role model.")
        if responses and role != "user":
            raise _refuse(f"contents[{i}]", "function response parts can only be in a turn of role user.")
        if responses:
            asked = _count(previous, "functionCall") if previous is not None and _role(previous) == "model" else 0
            if not asked:
                raise invalid(RESPONSE_AFTER_CALL)
            if responses != asked:
                raise invalid(SAME_COUNT)
        if calls:
            if previous is None or _role(previous) != "user":
                raise invalid(CALL_AFTER_USER)
            following = contents[i + 1] if i + 1 < len(contents) else None
            if following is not None and _count(following, "functionResponse") != calls:
                raise invalid(SAME_COUNT)


def _check_system(system: Mapping[str, Any] | None) -> None:
    for j, part in enumerate((system or {}).get("parts") or []):
        if part.get("text") is None or any(part.get(name) is not None for name in _DATA if name != "text"):
            raise _refuse(f"system_instruction.parts[{j}]", "system_instruction can only hold text parts.")


def _check_tools(tools: Sequence[Mapping[str, Any]]) -> set[str]:
    """The declared function names, refusing bad or repeated names and bad schemas."""
    names: set[str] = set()
    for i, tool in enumerate(tools):
        for j, declaration in enumerate(tool.get("functionDeclarations") or []):
            where = f"tools[{i}].function_declarations[{j}]"
            name = declaration.get("name")
            if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
                raise _refuse(f"{where}.name", BAD_FUNCTION_NAME)
            if name in names:
                raise _refuse(f"{where}.name", f"Duplicate function declaration: {name!r} is declared twice.")
            names.add(name)
            _check_declaration(declaration, where)
    return names


def _check_declaration(declaration: Mapping[str, Any], where: str) -> None:
    parameters, json_schema = declaration.get("parameters"), declaration.get("parametersJsonSchema")
    if parameters is not None and json_schema is not None:
        raise _refuse(where, "parameters and parameters_json_schema cannot both be set.")
    if json_schema is not None and not isinstance(json_schema, Mapping):
        raise _refuse(f"{where}.parameters_json_schema", "must be a JSON Schema object.")
    for name in ("parameters", "response"):
        schema = declaration.get(name)
        if schema is not None:
            _check_schema(schema, f"{where}.{name}")


def _check_schema(schema: Mapping[str, Any], where: str) -> None:
    kind = schema.get("type")
    properties: Mapping[str, Any] | None = schema.get("properties")
    if properties is not None:
        if kind is not None and kind != "OBJECT":
            raise _refuse(f"{where}.properties", "only allowed for OBJECT type")
        if kind == "OBJECT" and not properties:
            raise _refuse(f"{where}.properties", "should be non-empty for OBJECT type")
    required = schema.get("required") or []
    for k, name in enumerate([required] if isinstance(required, str) else required):
        if name not in (properties or {}):
            raise _refuse(f"{where}.required[{k}]", "property is not defined")
    values = schema.get("enum")
    if values is not None:
        if kind != "STRING":
            raise _refuse(f"{where}.enum", "only allowed for STRING type")
        for k, value in enumerate(values if isinstance(values, list) else [values]):
            if not isinstance(value, str):
                raise _bad_value(f"{where}.enum[{k}]", "TYPE_STRING", value)
    for name, sub in (properties or {}).items():
        _check_schema(sub, f"{where}.properties[{name}]")
    if schema.get("items") is not None:
        _check_schema(schema["items"], f"{where}.items")
    for k, branch in enumerate(schema.get("anyOf") or []):
        _check_schema(branch, f"{where}.any_of[{k}]")


def _check_tool_config(config: Mapping[str, Any], names: set[str]) -> None:
    calling: Mapping[str, Any] = config.get("functionCallingConfig") or {}
    allowed = calling.get("allowedFunctionNames") or []
    where = "tool_config.function_calling_config.allowed_function_names"
    if allowed and calling.get("mode") not in NAMING_MODES:
        raise _refuse(where, "allowed_function_names may only be set when mode is ANY or VALIDATED.")
    for k, name in enumerate([allowed] if isinstance(allowed, str) else allowed):
        if name not in names:
            raise _refuse(f"{where}[{k}]", f"{name!r} is not the name of a function declared in tools.")


def _check_generation(config: Mapping[str, Any]) -> None:
    limit = _number(config.get("maxOutputTokens"), "generation_config.max_output_tokens", "TYPE_INT32")
    if limit is not None and limit < 1:
        raise _refuse("generation_config.max_output_tokens", "max_output_tokens must be at least 1.")
    temperature = _number(config.get("temperature"), "generation_config.temperature", "TYPE_FLOAT")
    if temperature is not None and not 0 <= temperature <= 2:
        raise _refuse("generation_config.temperature", "temperature must be in the range [0.0, 2.0].")
    thinking: Mapping[str, Any] = config.get("thinkingConfig") or {}
    where = "generation_config.thinking_config.thinking_budget"
    budget = _number(thinking.get("thinkingBudget"), where, "TYPE_INT32")
    if budget is not None and budget < -1:
        raise _refuse(where, "thinking_budget must be -1 (dynamic thinking), 0 (no thinking) or more.")


def _number(value: Any, where: str, kind: str) -> float | None:
    """A number field's value (Google's reader takes numbers written as strings too); None when unset."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _bad_value(where, kind, value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _bad_value(where, kind, value) from None
