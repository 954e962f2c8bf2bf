"""Streamed answers: a finished Messages or chat completion answer as the events the real API streams.

The scripted model answers whole; a ``stream: true`` call gets the same answer cut into pieces,
framed as the providers frame them (server-sent events), so that the SDKs' stream parsers read
it as they read the real thing:

* Anthropic: ``message_start`` (the message with no content yet), then per content block
  ``content_block_start``, ``content_block_delta`` (``text_delta`` / ``input_json_delta``) and
  ``content_block_stop``, a ``ping`` after the first block starts, ``message_delta`` (stop
  reason and usage) and ``message_stop``; each as ``event: <type>`` plus ``data: <json>``.
* OpenAI: ``chat.completion.chunk`` objects as ``data: <json>`` lines: the role first, then text
  pieces or, per tool call, its id and name then pieces of its arguments, a chunk with the finish
  reason, with ``stream_options.include_usage`` a last chunk with no choices and the usage (every
  chunk before it has ``usage: null``), and ``data: [DONE]``.

An Anthropic ``overloaded_error`` or ``api_error`` on a streamed call comes inside the stream
(``message_start``, then ``event: error``), as the real API sends a failure during generation;
other refusals come before the stream, as an HTTP error.

Pure functions; cutting is deterministic (``PIECE`` characters at a time).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

PIECE: Final = 12  # characters per delta: several deltas for any real text, few enough to be quick


def pieces(text: str) -> list[str]:
    """``text`` cut into consecutive pieces of at most ``PIECE`` characters (none for no text)."""
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)]


def _sse(event: str | None, data: Mapping[str, Any]) -> bytes:
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def anthropic_events(message: Mapping[str, Any]) -> Iterator[bytes]:
    """A Messages API ``message`` as the server-sent events of a streamed call."""
    usage: Mapping[str, Any] = message.get("usage") or {}
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    yield _sse("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(message.get("content") or []):
        if block.get("type") == "tool_use":
            opening = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(json.dumps(block["input"]))]
        else:
            opening = {**block, "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(str(block.get("text") or ""))]
        yield _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
        if index == 0:
            yield _sse("ping", {"type": "ping"})
        for delta in deltas:
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


# The Anthropic errors a streamed call gets inside the stream rather than as its HTTP status.
IN_STREAM_ERRORS: Final = frozenset({"overloaded_error", "api_error"})


def anthropic_failed_events(message_id: str, model: str, error_type: str, message: str) -> Iterator[bytes]:
    """A streamed Messages call that fails once begun: ``message_start``, then ``event: error``."""
    start: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 1},
    }
    yield _sse("message_start", {"type": "message_start", "message": start})
    yield _sse("error", {"type": "error", "error": {"type": error_type, "message": message}})


def openai_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> Iterator[bytes]:
    """A ``chat.completion`` as the ``chat.completion.chunk`` lines of a streamed call."""
    (choice,) = completion["choices"]
    message: Mapping[str, Any] = choice["message"]
    head = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "service_tier": completion.get("service_tier"),
        "system_fingerprint": completion.get("system_fingerprint"),
    }
    if include_usage:
        head["usage"] = None

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        return _sse(None, {**head, "choices": choices})

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in pieces(message.get("content") or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**opening, "function": {"name": function["name"], "arguments": ""}}]})
        for piece in pieces(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield _sse(None, {**head, "choices": [], "usage": completion["usage"]})
    yield b"data: [DONE]\n\n"
