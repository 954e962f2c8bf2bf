"""Anthropic wire format: our requests to Messages API params, and Messages / Batches JSON back.

Pure functions over plain JSON values (dicts as the API sends and takes them), so they are
tested without a network or the SDK. What they guarantee about the request:

* the system prompt is a top-level text block and the last tool carries ``cache_control``, so the
  steps of an agent reuse the prompt cache (tools, then system, are the cached prefix);
* turns alternate: same-role messages are merged, tool results become ``tool_result`` blocks of a
  user turn (first in it), a history that starts with the assistant gets a first user turn;
* tool results whose call is not in the preceding assistant turn become plain text, and calls
  without a result get an error result, because the API refuses either;
* tool-use ids match ``^[a-zA-Z0-9_-]+$``: a stored id that does not (one another provider made)
  gets a stable stand-in, the same in the call and in its result (``tool_call_ids``);
* ``temperature`` is never sent: API version 2026-10-21 (anthropic 2.x) refuses it;
* several calls of one turn are ``tool_use`` blocks of one assistant turn (the reasoning goes into
  the first one's ``inner_thoughts``), answered by one ``tool_result`` each in the next user turn;
  ``disable_parallel_tool_use`` is set unless the request allows parallel calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import orjson

from nightshift.domain.messages import Image, Message, Role, ToolCall
from nightshift.domain.usage import Usage
from nightshift.errors import ProviderErrorKind
from nightshift.providers.agent_arguments import (
    joined_reasoning,
    split_agent_arguments,
    with_agent_arguments,
    with_reasoning,
)
from nightshift.providers.base import (
    FIRST_USER_TURN,
    MISSING_TOOL_RESULT,
    BatchCounts,
    BatchOutcome,
    BatchState,
    BatchStatus,
    CacheTtl,
    ModelError,
    ModelRequest,
    ModelResponse,
    OutcomeStatus,
    TextDelta,
    ToolCallDelta,
)
from nightshift.providers.tool_call_ids import anthropic_tool_use_id
from nightshift.providers.tool_lists import converted_once

Block = dict[str, Any]
# Blocks the API refuses a ``cache_control`` on (they are cached with the turn they belong to).
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def build_request(request: ModelRequest) -> dict[str, Any]:
    """Messages API params (without ``stream``) for one request, with the breakpoints of its
    ``cache`` plan: after the last tool, after the system prompt, after the last message.

    Returns:
        The params, as sent in ``POST /v1/messages`` or as a batch request's ``params``.
    """
    plan = request.cache
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": to_messages(request.messages, agent_arguments=request.agent_arguments),
    }
    if request.system:
        params["system"] = [_marked({"type": "text", "text": request.system}, plan.system)]
    if request.tools:
        tools = to_tools(request.tools, agent_arguments=request.agent_arguments)
        tools[-1] = _marked(tools[-1], plan.tools)
        params["tools"] = tools
        params["tool_choice"] = _tool_choice(request)
    last = params["messages"][-1]["content"]
    if plan.history is not None and last[-1].get("type") not in _UNMARKABLE:
        last[-1] = _marked(last[-1], plan.history)
    return params


def batch_entry(custom_id: str, request: ModelRequest) -> bytes:
    """One request of a Message Batch's ``requests``, as JSON."""
    return orjson.dumps({"custom_id": custom_id, "params": build_request(request)})


def _marked(block: Block, ttl: CacheTtl | None) -> Block:
    """``block`` as a cache breakpoint of lifetime ``ttl`` (None: as it is)."""
    if ttl is None:
        return block
    return {**block, "cache_control": {"type": "ephemeral", "ttl": ttl.value}}


def to_tools(tools: Sequence[Mapping[str, Any]], *, agent_arguments: bool = True) -> list[dict[str, Any]]:
    """Our tool schemas ``{name, description, parameters}`` as Anthropic tools, with the agent
    arguments when ``agent_arguments`` (the memgpt loops), else as they are."""
    return [_tool(t, agent_arguments) for t in tools]


@converted_once
def _tool(tool: Mapping[str, Any], agent_arguments: bool) -> dict[str, Any]:
    parameters = tool.get("parameters")
    return {
        "name": tool["name"],
        "description": tool.get("description") or "",
        "input_schema": (
            with_agent_arguments(parameters)
            if agent_arguments
            else dict(parameters or {"type": "object", "properties": {}})
        ),
    }


def _tool_choice(request: ModelRequest) -> dict[str, Any]:
    choice: dict[str, Any]
    if request.forced_tool is not None:
        choice = {"type": "tool", "name": request.forced_tool}
    else:
        choice = {"type": "any" if request.require_tool_call else "auto"}
    choice["disable_parallel_tool_use"] = not request.parallel_tool_calls
    return choice


def to_messages(messages: Sequence[Message], *, agent_arguments: bool = True) -> list[dict[str, Any]]:
    """Our in-context messages (after the system message) as alternating Anthropic turns.

    Without ``agent_arguments`` (letta_v1) past reasoning is not sent back: it came from thinking
    blocks, which the API takes back only with their signatures, in a request that thinks.
    """
    turns: list[tuple[str, list[Block]]] = []
    for message in messages:
        role, blocks = _blocks(message, agent_arguments=agent_arguments)
        if not blocks:
            continue
        if role == "user":
            blocks = [_checked_result(b, turns) for b in blocks]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    _answer_every_call(turns)
    if not turns or turns[0][0] != "user":
        turns.insert(0, ("user", [{"type": "text", "text": FIRST_USER_TURN}]))
    return [{"role": role, "content": _results_first(blocks)} for role, blocks in turns]


def _blocks(message: Message, *, agent_arguments: bool) -> tuple[str, list[Block]]:
    if message.role is Role.TOOL:
        result: Block = {"type": "tool_result", "tool_use_id": anthropic_tool_use_id(message.tool_call_id or "")}
        if message.text:
            result["content"] = message.text
        if message.is_error:
            result["is_error"] = True
        return "user", [result]
    if message.role is Role.ASSISTANT:
        blocks: list[Block] = []
        if message.text:
            blocks.append({"type": "text", "text": message.text})
        for index, call in enumerate(message.tool_calls):
            wire_id = anthropic_tool_use_id(call.id)
            # The turn's reasoning once, in its first call, as the model wrote it (memgpt loops only).
            reasoning = message.reasoning if index == 0 and agent_arguments else None
            blocks.append({"type": "tool_use", "id": wire_id, "name": call.name, "input": _input(call, reasoning)})
        if not blocks and message.reasoning and agent_arguments:
            blocks.append({"type": "text", "text": message.reasoning})
        return "assistant", blocks
    # user, and a system message in the middle of the history (the API has no such turn)
    text: list[Block] = [{"type": "text", "text": message.text}] if message.text else []
    return "user", text + [_image(image) for image in message.images]


def _image(image: Image) -> Block:
    if image.url:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}}


def _input(call: ToolCall, reasoning: str | None) -> dict[str, Any]:
    arguments = with_reasoning(call.arguments, reasoning)
    if arguments is None:
        # Malformed arguments the model wrote: show them as they were, the API wants an object.
        base = {"inner_thoughts": reasoning} if reasoning else {}
        return {**base, "arguments": call.arguments}
    return arguments


def _checked_result(block: Block, turns: list[tuple[str, list[Block]]]) -> Block:
    """A tool_result whose call is not in the preceding assistant turn, as text instead."""
    if block["type"] != "tool_result":
        return block
    if turns and turns[-1][0] == "user":
        previous = turns[-2][1] if len(turns) >= 2 else []
    else:
        previous = turns[-1][1] if turns else []
    calls = {b["id"] for b in previous if b["type"] == "tool_use"}
    if block["tool_use_id"] in calls:
        return block
    label = "Tool error" if block.get("is_error") else "Tool result"
    return {"type": "text", "text": f"{label}: {block.get('content', '')}"}


def _answer_every_call(turns: list[tuple[str, list[Block]]]) -> None:
    """Give every tool_use an answer in the next user turn (the API refuses a call left open)."""
    index = 0
    while index < len(turns):
        role, blocks = turns[index]
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if role == "assistant" and calls:
            if index + 1 == len(turns):
                turns.append(("user", []))
            answered = {b.get("tool_use_id") for b in turns[index + 1][1] if b["type"] == "tool_result"}
            missing = [
                {"type": "tool_result", "tool_use_id": c, "content": MISSING_TOOL_RESULT, "is_error": True}
                for c in calls
                if c not in answered
            ]
            turns[index + 1][1].extend(missing)
        index += 1


def _results_first(blocks: list[Block]) -> list[Block]:
    return sorted(blocks, key=lambda b: b["type"] != "tool_result")


def parse_message(message: Mapping[str, Any]) -> ModelResponse:
    """A Messages API response (a ``message`` object as JSON) as a neutral response.

    Every ``tool_use`` block is a tool call, in order; their ``inner_thoughts`` and
    ``request_heartbeat`` are taken out of the arguments. Without inner thoughts (letta_v1 tools)
    the reasoning is the model's own ``thinking`` blocks, where it gave them.
    """
    content: list[Mapping[str, Any]] = list(message.get("content") or [])
    texts = [str(b.get("text") or "") for b in content if b.get("type") == "text"]
    thinking = "\n".join(str(b.get("thinking") or "") for b in content if b.get("type") == "thinking").strip()
    calls = [b for b in content if b.get("type") == "tool_use"]
    splits = [split_agent_arguments(call.get("input") or {}) for call in calls]
    return ModelResponse(
        tool_calls=tuple(
            ToolCall(id=str(call.get("id")), name=str(call.get("name")), arguments=split.arguments)
            for call, split in zip(calls, splits, strict=True)
        ),
        reasoning=joined_reasoning(splits) or thinking or None,
        request_heartbeat=any(split.request_heartbeat for split in splits),
        text="\n".join(t for t in texts if t) or None,
        usage=parse_usage(message.get("usage") or {}),
        stop_reason=message.get("stop_reason"),
        model=message.get("model"),
        raw=message,
    )


def parse_usage(usage: Mapping[str, Any]) -> Usage:
    """Anthropic ``usage`` as our usage (``None`` counts are zero).

    ``cache_creation`` splits the cache writes by lifetime (5 minutes or 1 hour, billed 1.25x and
    2x the input price); without it the writes stay unattributed, and are priced at the lifetime
    the request asked for.
    """
    creation: Mapping[str, Any] = usage.get("cache_creation") or {}
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
        cache_write_5m_tokens=int(creation.get("ephemeral_5m_input_tokens") or 0),
        cache_write_1h_tokens=int(creation.get("ephemeral_1h_input_tokens") or 0),
    )


class StreamAssembler:
    """The events of a streamed Messages call (``stream: true``), folded into the message they build.

    ``feed`` takes each server-sent event's data as JSON (``message_start``, ``content_block_start``,
    ``content_block_delta``, ``content_block_stop``, ``message_delta``, ``message_stop``; ``ping``
    and unknown events are ignored) and returns the deltas it carries; ``response`` is the whole
    answer once the stream has ended, parsed as ``parse_message`` parses a non-streamed one.
    """

    def __init__(self) -> None:
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._calls: dict[int, int] = {}  # content block index -> index of the tool call in the turn

    def feed(self, event: Mapping[str, Any]) -> list[TextDelta | ToolCallDelta]:
        """Take one event; returns the text and tool-call pieces it holds, in order."""
        kind = event.get("type")
        if kind == "message_start":
            self._message = dict(event.get("message") or {})
            self._message["usage"] = dict(self._message.get("usage") or {})
            return []
        if kind == "message_delta":
            delta: Mapping[str, Any] = event.get("delta") or {}
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    self._message[key] = delta[key]
            # The usage of message_delta is cumulative; counts it leaves out keep their start value.
            usage: Mapping[str, Any] = event.get("usage") or {}
            self._message.setdefault("usage", {}).update({k: v for k, v in usage.items() if v is not None})
            return []
        index = int(event.get("index") or 0)
        if kind == "content_block_start":
            block = dict(event.get("content_block") or {})
            self._blocks[index] = block
            if block.get("type") == "tool_use":
                call = self._calls[index] = len(self._calls)
                self._json[index] = []
                return [ToolCallDelta(index=call, id=block.get("id"), name=block.get("name"))]
            if block.get("type") == "text" and block.get("text"):
                return [TextDelta(text=str(block["text"]))]
            return []
        if kind == "content_block_delta":
            return self._delta(index, event.get("delta") or {})
        if kind == "content_block_stop" and index in self._calls:
            text = "".join(self._json.get(index, []))
            try:
                value = json.loads(text) if text.strip() else {}
            except ValueError:
                value = text  # kept verbatim: the runtime reports arguments that are not JSON
            self._blocks[index]["input"] = value
        return []

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[TextDelta | ToolCallDelta]:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        if delta.get("type") == "text_delta":
            text = str(delta.get("text") or "")
            block["text"] = str(block.get("text") or "") + text
            return [TextDelta(text=text)] if text else []
        if delta.get("type") == "input_json_delta" and index in self._calls:
            piece = str(delta.get("partial_json") or "")
            self._json[index].append(piece)
            return [ToolCallDelta(index=self._calls[index], arguments=piece)] if piece else []
        return []  # thinking and signature deltas: nightshift asks for no extended thinking

    def response(self) -> ModelResponse:
        """The answer the stream built (call once it has ended)."""
        message = {**self._message, "content": [self._blocks[i] for i in sorted(self._blocks)]}
        return parse_message(message)


def parse_result_line(line: Mapping[str, Any]) -> tuple[str, BatchOutcome]:
    """One line of a batch's results JSONL as ``(custom_id, outcome)``."""
    custom_id = str(line.get("custom_id"))
    result: Mapping[str, Any] = line.get("result") or {}
    kind = result.get("type")
    if kind == "succeeded":
        response = parse_message(result.get("message") or {})
        return custom_id, BatchOutcome(status=OutcomeStatus.SUCCEEDED, response=response, raw=line)
    if kind == "canceled":
        return custom_id, BatchOutcome(status=OutcomeStatus.CANCELED, raw=line)
    if kind == "expired":
        return custom_id, BatchOutcome(status=OutcomeStatus.EXPIRED, raw=line)
    # errored: the error type is error.error.type ({"type": "error", "error": {...}})
    outer: Mapping[str, Any] = result.get("error") or {}
    inner: Mapping[str, Any] = outer.get("error") or outer
    error = ModelError(
        type=str(inner.get("type") or ProviderErrorKind.API_ERROR.value),
        message=str(inner.get("message") or f"unexpected batch result {json.dumps(result)[:200]}"),
    )
    return custom_id, BatchOutcome(status=OutcomeStatus.ERRORED, error=error, raw=line)


_STATES: Final = {
    "in_progress": BatchState.IN_PROGRESS,
    "canceling": BatchState.CANCELING,
    "ended": BatchState.ENDED,
}


def parse_batch(batch: Mapping[str, Any]) -> BatchStatus:
    """A ``message_batch`` object as JSON as our batch status."""
    counts: Mapping[str, Any] = batch.get("request_counts") or {}
    status = str(batch.get("processing_status"))
    return BatchStatus(
        id=str(batch["id"]),
        state=_STATES.get(status, BatchState.IN_PROGRESS),
        counts=BatchCounts(
            processing=int(counts.get("processing") or 0),
            succeeded=int(counts.get("succeeded") or 0),
            errored=int(counts.get("errored") or 0),
            canceled=int(counts.get("canceled") or 0),
            expired=int(counts.get("expired") or 0),
        ),
        provider_status=status,
        created_at=_time(batch["created_at"]),
        expires_at=_optional_time(batch.get("expires_at")),
        ended_at=_optional_time(batch.get("ended_at")),
    )


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _optional_time(value: Any) -> datetime | None:
    return None if value is None else _time(value)
