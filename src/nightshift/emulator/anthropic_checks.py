"""What the Anthropic Messages and Message Batches APIs refuse, as pure checks with the API's words.

A refusal is an ``ApiError`` 400 ``invalid_request_error`` whose message starts with the place, as
the API writes it (``tools.0.custom.name: String should match pattern '...'``,
``messages.1.content.0.tool_use.id: ...``, ``foo: Extra inputs are not permitted``), or is the
API's own sentence for tool pairing. ``check_params`` refuses:

* fields the Messages API does not have; a missing ``model`` or ``max_tokens``; ``stream`` in a
  batch request;
  ``temperature`` / ``top_p`` / ``top_k`` from API version 2026-10-21 on;
* tools: unknown fields of a custom tool, a name outside ``^[a-zA-Z0-9_-]{1,128}$`` or used twice,
  an ``input_schema`` that is not of type object or not a valid JSON Schema (draft 2020-12); a
  ``tool_choice`` of an unknown type or naming no tool;
* messages: unknown roles or fields, empty text blocks, a ``tool_use`` whose id is outside
  ``^[a-zA-Z0-9_-]+$`` or repeats an earlier one, whose name is invalid or whose input is not an
  object, a ``tool_result`` whose ``tool_use_id`` is outside the pattern; a first turn that is not
  the user's; a ``tool_use`` not answered by a ``tool_result`` at the start of the next user turn
  (consecutive turns of one role count as one, as the API combines them); a ``tool_result`` that
  answers no ``tool_use`` of the assistant turn just before.

``check_batch`` refuses a whole batch create: no requests or more than 100,000, a custom_id outside
``^[a-zA-Z0-9_-]{1,64}$`` or repeated, a request without params. Each request's params are checked
later, when the batch processes it (an ``errored`` result), as the API documents.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from nightshift.emulator.errors import invalid
from nightshift.emulator.json_schemas import schema_problem

STRICT_VERSION: Final = "2026-10-21"  # from this version on, sampling parameters are refused
SAMPLING: Final = ("temperature", "top_p", "top_k")
CUSTOM_ID: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
TOOL_USE_ID: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
MAX_REQUESTS: Final = 100_000

# The Messages API's body fields (anthropic 2.x SDK, plus sampling and beta fields of older versions).
FIELDS: Final = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
        "output_config",
        "inference_geo",
        "cache_control",
        "speed",
        "diagnostics",
        "user_profile_id",
        "workspace_id",
    }
)
_CUSTOM_TOOL_FIELDS: Final = frozenset(
    {
        "type",
        "name",
        "description",
        "input_schema",
        "cache_control",
        "strict",
        "defer_loading",
        "input_examples",
        "allowed_callers",
        "eager_input_streaming",
    }
)
_MESSAGE_FIELDS: Final = frozenset({"role", "content"})
# Fields of the content blocks whose shape is checked; other block types pass as they are.
_BLOCK_FIELDS: Final = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control", "caller"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "image": frozenset({"type", "source", "cache_control"}),
}
# The image types the Messages API takes in a base64 source.
IMAGE_MEDIA_TYPES: Final = ("image/jpeg", "image/png", "image/gif", "image/webp")
_SCHEMA_INVALID: Final = (
    "JSON schema is invalid. It must match JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12). "
    "Learn more about tool use at https://docs.claude.com/en/docs/tool-use."
)


def check_params(params: Any, *, version: str | None, allow_stream: bool = False) -> Mapping[str, Any]:
    """Refuse params the Messages API would refuse; returns them typed as a mapping.

    Args:
        params: The request body, or a batch request's ``params``, as received.
        version: The ``anthropic-version`` header (sampling fields are refused from 2026-10-21 on).

    Returns:
        The same params.

    Raises:
        ApiError: 400 ``invalid_request_error`` naming the place and the problem.
    """
    if not isinstance(params, Mapping):
        raise invalid("params: Input should be an object")
    _no_extra(params, FIELDS, "")
    model = params.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model: Field required")
    max_tokens = params.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise invalid("max_tokens: Field required")
    if max_tokens < 0:
        raise invalid("max_tokens: Input should be greater than or equal to 0")
    if params.get("stream") and not allow_stream:
        raise invalid("stream: a batch request cannot be streamed")
    if version is not None and version >= STRICT_VERSION:
        for name in SAMPLING:
            if name in params:
                raise invalid(f"{name}: this parameter is not supported with anthropic-version {version}")
    temperature = params.get("temperature")
    if temperature is not None and not (isinstance(temperature, int | float) and 0 <= temperature <= 1):
        raise invalid("temperature: Input should be between 0 and 1")
    tools = _check_tools(params.get("tools"))
    _check_tool_choice(params.get("tool_choice"), tools)
    _check_system(params.get("system"))
    _check_messages(params.get("messages"))
    return params


def _no_extra(value: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    extra = [key for key in value if key not in allowed]
    if extra:
        raise invalid(f"{where}{extra[0]}: Extra inputs are not permitted")


def _check_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise invalid(f"tools.{i}.name: Field required")
        if tool.get("type") in (None, "custom"):
            _check_custom_tool(tool, f"tools.{i}.custom")
        if tool["name"] in names:
            raise invalid("tools: Tool names must be unique.")
        names.add(tool["name"])
    return names


def _check_custom_tool(tool: Mapping[str, Any], where: str) -> None:
    _no_extra(tool, _CUSTOM_TOOL_FIELDS, f"{where}.")
    if not TOOL_NAME.fullmatch(tool["name"]):
        raise invalid(f"{where}.name: String should match pattern '{TOOL_NAME.pattern}'")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid(f"{where}.description: Input should be a valid string")
    schema = tool.get("input_schema")
    if schema is None:
        raise invalid(f"{where}.input_schema: Field required")
    if not isinstance(schema, Mapping):
        raise invalid(f"{where}.input_schema: Input should be a valid dictionary")
    if schema.get("type") != "object":
        raise invalid(f"{where}.input_schema.type: Input should be 'object'")
    if schema_problem(schema) is not None:
        raise invalid(f"{where}.input_schema: {_SCHEMA_INVALID}")


def _check_tool_choice(choice: Any, tools: set[str]) -> None:
    if choice is None:
        return
    if not isinstance(choice, Mapping) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise invalid("tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'")
    if choice["type"] == "tool" and choice.get("name") not in tools:
        raise invalid(f"tool_choice.name: tool {choice.get('name')!r} is not among the tools of the request")


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list) or not all(isinstance(b, Mapping) and b.get("type") == "text" for b in system):
        raise invalid("system: Input should be a string or a list of text blocks")


@dataclass(slots=True)
class _Turn:
    """Consecutive messages of one role, combined as the API combines them."""

    role: str
    first: int  # index of its first message
    blocks: list[tuple[int, int, Mapping[str, Any]]] = field(default_factory=list)  # (message, block, block)


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise invalid("messages: Field required")
    if not messages:
        raise invalid("messages: at least one message is required")
    turns: list[_Turn] = []
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            raise invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        _no_extra(message, _MESSAGE_FIELDS, f"messages.{i}.")
        blocks = content_blocks(message.get("content"), f"messages.{i}.content")
        for j, block in enumerate(blocks):
            _check_block(block, f"messages.{i}.content.{j}")
            if block["type"] == "tool_use":
                if block["id"] in seen_ids:
                    raise invalid(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
                seen_ids.add(block["id"])
        if not turns or turns[-1].role != message["role"]:
            turns.append(_Turn(role=message["role"], first=i))
        turns[-1].blocks.extend((i, j, block) for j, block in enumerate(blocks))
    if turns[0].role != "user":
        raise invalid("messages: the first message must use the user role")
    for index, turn in enumerate(turns):
        if turn.role == "user":
            _check_results(turn, turns[index - 1] if index > 0 else None)
        else:
            _check_calls(turn, turns[index + 1] if index + 1 < len(turns) else None)


def _check_block(block: Mapping[str, Any], where: str) -> None:
    kind = block["type"]
    allowed = _BLOCK_FIELDS.get(kind)
    if allowed is None:
        return
    _no_extra(block, allowed, f"{where}.{kind}.")
    if kind == "text" and not block.get("text"):
        raise invalid(f"{where}.text: text content blocks must be non-empty")
    if kind == "image":
        _check_image_source(block.get("source"), f"{where}.image.source")
    if kind == "tool_use":
        if not isinstance(block.get("id"), str) or not TOOL_USE_ID.fullmatch(block["id"]):
            raise invalid(f"{where}.tool_use.id: String should match pattern '{TOOL_USE_ID.pattern}'")
        if not isinstance(block.get("name"), str) or not TOOL_NAME.fullmatch(block["name"]):
            raise invalid(f"{where}.tool_use.name: String should match pattern '{TOOL_NAME.pattern}'")
        if not isinstance(block.get("input"), Mapping):
            raise invalid(f"{where}.tool_use.input: Input should be a valid dictionary")
    if kind == "tool_result":
        tool_use_id = block.get("tool_use_id")
        if not isinstance(tool_use_id, str) or not TOOL_USE_ID.fullmatch(tool_use_id):
            raise invalid(f"{where}.tool_result.tool_use_id: String should match pattern '{TOOL_USE_ID.pattern}'")


def _check_results(turn: _Turn, previous: _Turn | None) -> None:
    """Each tool_result of a user turn answers a tool_use of the assistant turn just before."""
    asked = {b["id"] for _, _, b in previous.blocks if b["type"] == "tool_use"} if previous else set()
    for i, j, block in turn.blocks:
        if block["type"] == "tool_result" and block["tool_use_id"] not in asked:
            raise invalid(
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{block['tool_use_id']}. Each `tool_result` block must have a corresponding `tool_use` block "
                "in the previous message."
            )


def _check_calls(turn: _Turn, following: _Turn | None) -> None:
    """Each tool_use of an assistant turn is answered by the tool_results that open the next turn."""
    calls = [b["id"] for _, _, b in turn.blocks if b["type"] == "tool_use"]
    if not calls:
        return
    answered: set[str] = set()
    for _, _, block in following.blocks if following else []:
        if block["type"] != "tool_result":
            break  # results after other content do not count: they must come first
        answered.add(block["tool_use_id"])
    missing = [c for c in calls if c not in answered]
    if missing:
        where = following.first if following else turn.first + 1
        raise invalid(
            f"messages.{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block in the "
            "next message."
        )


def _check_image_source(source: Any, where: str) -> None:
    """An image block's source: base64 bytes of a known image type, or a URL."""
    if not isinstance(source, Mapping) or source.get("type") not in ("base64", "url"):
        raise invalid(f"{where}: Input tag does not match any of the expected tags: 'base64', 'url'")
    if source["type"] == "url":
        _no_extra(source, frozenset({"type", "url"}), f"{where}.url.")
        if not isinstance(source.get("url"), str) or not source["url"]:
            raise invalid(f"{where}.url.url: Field required")
        return
    _no_extra(source, frozenset({"type", "media_type", "data"}), f"{where}.base64.")
    if source.get("media_type") not in IMAGE_MEDIA_TYPES:
        expected = ", ".join(f"'{t}'" for t in IMAGE_MEDIA_TYPES)
        raise invalid(f"{where}.base64.media_type: Input should be {expected}")
    data = source.get("data")
    if not isinstance(data, str) or not data:
        raise invalid(f"{where}.base64.data: Field required")
    try:
        base64.b64decode(data, validate=True)
    except binascii.Error:
        raise invalid(f"{where}.base64.data: The image data is not valid base64") from None


def content_blocks(content: Any, where: str) -> list[Mapping[str, Any]]:
    """A message's content as blocks (a string is one text block); refuses what is not content.

    Raises:
        ApiError: 400 when the content is not a string or a list of typed blocks.
    """
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise invalid(f"{where}: Input should be a string or a list of content blocks")
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise invalid(f"{where}.{j}.type: Field required")
    return list(content)


def check_batch(body: Any) -> list[tuple[str, Any]]:
    """The ``(custom_id, params)`` of a batch create body, refusing what the API refuses at once.

    Raises:
        ApiError: 400 for a missing or empty request list, too many requests, a custom_id that
            does not match ``^[a-zA-Z0-9_-]{1,64}$`` or appears twice, a request without params.
    """
    requests = body.get("requests") if isinstance(body, Mapping) else None
    if not isinstance(requests, list):
        raise invalid("requests: Field required")
    if not requests:
        raise invalid("requests: List should have at least 1 item after validation, not 0")
    if len(requests) > MAX_REQUESTS:
        raise invalid(f"requests: List should have at most {MAX_REQUESTS} items after validation, not {len(requests)}")
    seen: set[str] = set()
    out: list[tuple[str, Any]] = []
    for i, request in enumerate(requests):
        custom_id = request.get("custom_id") if isinstance(request, Mapping) else None
        if not isinstance(custom_id, str):
            raise invalid(f"requests.{i}.custom_id: Field required")
        if not CUSTOM_ID.fullmatch(custom_id):
            raise invalid(f"requests.{i}.custom_id: String should match pattern '{CUSTOM_ID.pattern}'")
        if custom_id in seen:
            raise invalid(f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r}; custom_ids must be unique")
        if "params" not in request:
            raise invalid(f"requests.{i}.params: Field required")
        seen.add(custom_id)
        out.append((custom_id, request["params"]))
    return out
