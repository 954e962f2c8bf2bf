"""What the OpenAI Chat Completions and Batch APIs refuse, as pure checks with the API's words.

``check_body`` refuses a chat body as ``POST /v1/chat/completions`` does, with the API's message,
``param`` and ``code``:

* a field the endpoint does not have: ``Unrecognized request argument supplied: foo``; an unknown
  field of a message, tool or tool call: ``Unknown parameter: 'messages[1].foo'.``
  (``unknown_parameter``); no model, no messages, a token limit below 1;
* tools: a function name longer than 64 characters (``string_above_max_length``) or outside
  ``^[a-zA-Z0-9_-]+$`` (``invalid_value``), a description over 1,024 characters, ``parameters``
  that are not an object schema of type object or not a valid JSON Schema
  (``invalid_function_parameters``); ``tool_choice`` / ``parallel_tool_calls`` without tools, a
  ``tool_choice`` naming no tool;
* messages: an unknown role; a tool call without an id or whose id is longer than 40 characters
  (``string_above_max_length``, the limit nightshift once broke); an assistant message with
  ``tool_calls`` not followed by a ``tool`` message for each id, a ``tool`` message answering no
  call of the assistant message before it.

``parse_input_file`` validates a batch input file as the Batch API does while the batch is
``validating``; any error fails the whole batch (``errors.data`` entries ``{code, message, param,
line}``). A request refused by ``check_body`` inside a valid file gets a 400 in the error file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from nightshift.emulator.errors import ApiError, invalid
from nightshift.emulator.json_schemas import schema_problem

ENDPOINT: Final = "/v1/chat/completions"
MAX_REQUESTS: Final = 50_000
MAX_FILE_BYTES: Final = 200 * 1024 * 1024
MAX_TOOL_CALL_ID: Final = 40
MAX_FUNCTION_NAME: Final = 64
MAX_DESCRIPTION: Final = 1024
FUNCTION_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
_MAX_FILE_ERRORS: Final = 100

# The Chat Completions body fields (openai 3.x SDK).
FIELDS: Final = frozenset(
    {
        "model",
        "messages",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
_MESSAGE_FIELDS: Final = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_TOOL_FIELDS: Final = frozenset({"type", "function"})
_IMAGE_DATA_URL: Final = re.compile(r"data:image/(jpeg|png|gif|webp);base64,[A-Za-z0-9+/]+={0,2}")
_FUNCTION_FIELDS: Final = frozenset({"name", "description", "parameters", "strict"})
_CALL_FIELDS: Final = frozenset({"id", "type", "function"})
_CALL_FUNCTION_FIELDS: Final = frozenset({"name", "arguments"})


# The service tiers a chat request may ask for, and the models that have the flex tier (billed
# at batch prices, answered more slowly).
SERVICE_TIERS: Final = ("auto", "default", "flex", "scale", "priority")
FLEX_MODELS: Final = ("o3", "o4-mini", "gpt-5")


def check_body(body: Any) -> Mapping[str, Any]:
    """Refuse a chat body the API would refuse; returns it typed as a mapping.

    Raises:
        ApiError: 400 ``invalid_request_error`` with the API's message, ``param`` and ``code``.
    """
    if not isinstance(body, Mapping):
        raise invalid("The request body must be a JSON object")
    unknown = [key for key in body if key not in FIELDS]
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise invalid(f"Unrecognized request argument{plural} supplied: {', '.join(unknown)}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise invalid("you must provide a model parameter", param="model")
    tier = body.get("service_tier")
    if tier is not None and tier not in SERVICE_TIERS:
        raise invalid(
            f"Invalid value: '{tier}'. Supported values are: {', '.join(repr(t) for t in SERVICE_TIERS)}.",
            param="service_tier",
        )
    if tier == "flex" and not body["model"].startswith(FLEX_MODELS):
        raise invalid(f"Flex is not available for this model: {body['model']}.", param="service_tier")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("Invalid 'messages': empty array. Expected an array with minimum length 1.", param="messages")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise invalid(
                f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but got {value!r} instead.",
                param=name,
                code="integer_below_min_value",
            )
    if body.get("stream_options") is not None and not body.get("stream"):
        raise invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.", param="stream_options"
        )
    tools = _check_tools(body.get("tools"))
    if not tools and body.get("tool_choice") is not None:
        raise invalid(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            param="tool_choice",
        )
    if not tools and body.get("parallel_tool_calls") is not None:
        raise invalid(
            "Invalid value for 'parallel_tool_calls': only allowed when 'tools' are specified.",
            param="parallel_tool_calls",
        )
    _check_tool_choice(body.get("tool_choice"), tools)
    _check_messages(messages)
    return body


def _unknown(value: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in value:
        if key not in allowed:
            path = f"{where}.{key}"
            raise invalid(f"Unknown parameter: '{path}'.", param=path, code="unknown_parameter")


def _missing(path: str) -> ApiError:
    return invalid(f"Missing required parameter: '{path}'.", param=path, code="missing_required_parameter")


def _too_long(path: str, value: str, limit: int) -> ApiError | None:
    if len(value) <= limit:
        return None
    return invalid(
        f"Invalid '{path}': string too long. Expected a string with maximum length {limit}, "
        f"but got a string with length {len(value)} instead.",
        param=path,
        code="string_above_max_length",
    )


def _check_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise invalid("Invalid type for 'tools': expected an array.", param="tools", code="invalid_type")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(function, Mapping):
            raise _missing(f"{where}.function")
        _unknown(tool, _TOOL_FIELDS, where)
        _unknown(function, _FUNCTION_FIELDS, f"{where}.function")
        names.add(_check_function(function, f"{where}.function"))
    return names


def _check_function(function: Mapping[str, Any], where: str) -> str:
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _missing(f"{where}.name")
    problem = _too_long(f"{where}.name", name, MAX_FUNCTION_NAME)
    if problem is not None:
        raise problem
    if not FUNCTION_NAME.fullmatch(name):
        raise invalid(
            f"Invalid '{where}.name': string does not match pattern. "
            f"Expected a string that matches the pattern '{FUNCTION_NAME.pattern}'.",
            param=f"{where}.name",
            code="invalid_value",
        )
    description = function.get("description")
    if description is not None:
        problem = _too_long(f"{where}.description", str(description), MAX_DESCRIPTION)
        if problem is not None:
            raise problem
    parameters = function.get("parameters")
    if parameters is not None:
        _check_parameters(name, parameters, f"{where}.parameters")
    return name


def _check_parameters(name: str, parameters: Any, where: str) -> None:
    if not isinstance(parameters, Mapping):
        raise invalid(
            f"Invalid type for '{where}': expected an object, but got {type(parameters).__name__} instead.",
            param=where,
            code="invalid_type",
        )

    def refuse(problem: str) -> ApiError:
        message = f"Invalid schema for function '{name}': {problem}."
        return invalid(message, param=where, code="invalid_function_parameters")

    if parameters.get("type") != "object":
        raise refuse(f"""schema must be a JSON Schema of 'type: "object"', got 'type: "{parameters.get("type")}"'""")
    problem = schema_problem(parameters)
    if problem is not None:
        raise refuse(problem)


def _check_tool_choice(choice: Any, tools: set[str]) -> None:
    if choice is None or choice in ("none", "auto", "required"):
        return
    function = choice.get("function") if isinstance(choice, Mapping) else None
    if not isinstance(function, Mapping) or function.get("name") not in tools:
        raise invalid("Invalid value for 'tool_choice': no tool of the request has that name.", param="tool_choice")


def _check_messages(messages: list[Any]) -> None:
    open_calls: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in _MESSAGE_FIELDS:
            raise invalid(f"Invalid value for 'messages[{i}].role'.", param=f"messages[{i}].role")
        role = message["role"]
        _unknown(message, _MESSAGE_FIELDS[role], f"messages[{i}]")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _missing(f"messages[{i}].tool_call_id")
            if call_id not in open_calls:
                raise invalid(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            open_calls.remove(call_id)
            continue
        if open_calls:
            raise _unanswered(open_calls, f"messages.[{i}].role")
        if role == "user" and isinstance(message.get("content"), list):
            _check_user_parts(message["content"], f"messages[{i}].content")
        if role == "assistant":
            open_calls = _check_calls(message.get("tool_calls"), f"messages[{i}].tool_calls")
    if open_calls:
        raise _unanswered(open_calls, "messages")


def _check_user_parts(parts: list[Any], where: str) -> None:
    """A user message's content parts: text, or an image by an http(s) or base64 ``data:`` URL."""
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise _missing(f"{where}[{j}].text")
            continue
        if kind != "image_url":
            raise invalid(
                f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', "
                "'audio', and 'file'.",
                param=f"{where}[{j}].type",
            )
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else None
        if not isinstance(url, str):
            raise _missing(f"{where}[{j}].image_url.url")
        if not (url.startswith(("http://", "https://")) or _IMAGE_DATA_URL.match(url)):
            raise invalid(
                "Invalid image URL: expected an http(s) URL or a base64-encoded data URL of an image.",
                param=f"{where}[{j}].image_url.url",
            )


def _check_calls(calls: Any, where: str) -> list[str]:
    """The ids of an assistant message's tool calls, refusing malformed ones."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise invalid(f"Invalid type for '{where}': expected an array.", param=where, code="invalid_type")
    ids: list[str] = []
    for j, call in enumerate(calls):
        path = f"{where}[{j}]"
        if not isinstance(call, Mapping):
            raise invalid(f"Invalid type for '{path}': expected an object.", param=path, code="invalid_type")
        _unknown(call, _CALL_FIELDS, path)
        call_id = call.get("id")
        if not isinstance(call_id, str):
            raise _missing(f"{path}.id")
        function = call.get("function")
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise _missing(f"{path}.function.name")
        _unknown(function, _CALL_FUNCTION_FIELDS, f"{path}.function")
        problem = _too_long(f"{path}.id", call_id, MAX_TOOL_CALL_ID) or _too_long(
            f"{path}.function.name", function["name"], MAX_FUNCTION_NAME
        )
        if problem is not None:
            raise problem
        ids.append(call_id)
    return ids


def _unanswered(open_calls: list[str], param: str) -> ApiError:
    return invalid(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_calls)}",
        param=param,
    )


def parse_input_file(
    data: bytes, endpoint: str, *, max_bytes: int = MAX_FILE_BYTES
) -> tuple[list[tuple[str, Any]], list[dict[str, Any]]]:
    """The ``(custom_id, body)`` of each line of a batch input file, or the validation errors.

    A file is refused (every problem listed, at most 100) when it is over ``max_bytes`` or empty, has
    more than 50,000 lines, or a line that is not a JSON object, lacks ``custom_id``, ``method``,
    ``url`` or ``body``, repeats a custom_id, is not ``POST`` to the batch's endpoint, has no model
    or messages in its body, asks for streaming, or names another model than the lines before it.

    Returns:
        The requests, and the errors ``{"code", "message", "param", "line"}`` (empty when valid).
    """
    requests: list[tuple[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    model: str | None = None

    def fail(line: int | None, code: str, message: str, param: str | None = None) -> None:
        if len(errors) < _MAX_FILE_ERRORS:
            errors.append({"code": code, "message": message, "param": param, "line": line})

    if len(data) > max_bytes:
        fail(None, "file_too_large", f"The batch input file is larger than the {max_bytes // 2**20} MB limit.")
        return [], errors
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        fail(1, "empty_file", "The batch input file is empty.")
    if len(lines) > MAX_REQUESTS:
        fail(MAX_REQUESTS + 1, "too_many_requests", f"A batch can hold at most {MAX_REQUESTS} requests.")
    for number, raw in enumerate(lines, start=1):
        try:
            item = json.loads(raw)
        except ValueError:
            fail(number, "invalid_json_line", "This line is not parseable as valid JSON.")
            continue
        problem = _line_problem(item, endpoint, seen)
        if problem is not None:
            fail(number, *problem)
            continue
        body = item["body"]
        model = model if model is not None else body["model"]
        if body["model"] != model:
            fail(
                number,
                "mismatched_model",
                "The provided model for this request does not match the models for other requests in the "
                "batch. All requests in a batch must use the same model.",
                "body.model",
            )
            continue
        requests.append((item["custom_id"], body))
    return requests, errors


def _line_problem(item: Any, endpoint: str, seen: set[str]) -> tuple[str, str, str | None] | None:
    """What is wrong with one parsed line, as ``(code, message, param)``; None when it is fine."""
    if not isinstance(item, dict):
        return "invalid_json_line", "This line is not a JSON object.", None
    for name in ("custom_id", "method", "url", "body"):
        if item.get(name) in (None, ""):
            return "missing_required_parameter", f"Missing required parameter: '{name}'.", name
    custom_id = item["custom_id"]
    if not isinstance(custom_id, str):
        return "invalid_type", "The custom_id must be a string.", "custom_id"
    if custom_id in seen:
        return (
            "duplicate_custom_id",
            "The custom_id for this request is a duplicate of another request. "
            "The custom_id parameter must be unique for each request in a batch.",
            "custom_id",
        )
    seen.add(custom_id)
    if item["method"] != "POST":
        return "invalid_method", "The method must be POST.", "method"
    if item["url"] != endpoint:
        return "invalid_url", "The URL provided for this request does not match the batch endpoint.", "url"
    body = item["body"]
    if not isinstance(body, dict):
        return "invalid_type", "The body must be a JSON object.", "body"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "invalid_request", "Model parameter is required.", "body.model"
    if "messages" not in body:
        return "invalid_request", "Messages parameter is required.", "body.messages"
    if body.get("stream"):
        return "streaming_unsupported", "Chat Completions: Streaming is not supported in the Batch API.", "body.stream"
    return None
