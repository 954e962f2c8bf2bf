"""Gemini wire format: our requests to ``generateContent`` bodies and batch lines, and back.

Pure functions over the REST API's JSON (camelCase, as the API takes it and as a batch's JSONL
file holds it); ``client`` hands the same bodies to the SDK. What they guarantee about the request:

* the system prompt is ``systemInstruction``; tools are one ``functionDeclarations`` list whose
  schemas are translated by ``schema.gemini_schema`` (a tool it refuses is refused before a step);
* turns alternate ``user``/``model``: same-role messages are merged, a history that starts with the
  model gets a first user turn;
* a model turn's function calls are answered, in their order, by ``functionResponse`` parts at the
  start of the next user turn (``{"output": text}``, or ``{"error": text}`` for a failed call); a
  tool result whose call is not in the model turn before it becomes text, and a call without a
  result gets an error response, because the API refuses either;
* a tool call is required with ``mode: ANY`` (one forced tool: ``allowedFunctionNames``);
* a call goes back with the ``thoughtSignature`` it came with (stored with the call); for Gemini 3
  and later, which refuse a turn whose first call has none, a call without one gets Google's
  documented stand-in (``UNSIGNED``).

Gemini sends no id with a function call: the answer's calls get ``call_`` ids made from the
response's id (or its content) and their index, the same every time the answer is read. Gemini
cannot be told to call one tool at most: an answer's calls are all the turn's calls, whatever
the agent's ``parallel_tool_calls``.
Thinking models think by default; a letta_v1 agent's request asks for the thoughts' summaries,
which become the answer's reasoning. Thought tokens are billed as output tokens.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from nightshift.domain.messages import Image, Message, Role, ToolCall
from nightshift.domain.usage import Usage
from nightshift.errors import ProviderError, ProviderErrorKind
from nightshift.providers.agent_arguments import (
    joined_reasoning,
    split_agent_arguments,
    with_agent_arguments,
    with_reasoning,
)
from nightshift.providers.base import (
    FIRST_USER_TURN,
    MISSING_TOOL_RESULT,
    BatchOutcome,
    ModelError,
    ModelRequest,
    ModelResponse,
    OutcomeStatus,
    TextDelta,
    ToolCallDelta,
)
from nightshift.providers.errors import kind_for_status
from nightshift.providers.google_ai.schema import UnsupportedSchema, gemini_schema
from nightshift.providers.tool_lists import converted_once

EMPTY_PARAMETERS: Final[Mapping[str, Any]] = {"type": "object", "properties": {}}

Part = dict[str, Any]
# What Google's documentation says to send for a call whose thought signature we do not have (a
# call another provider's model made, or one stored before signatures were kept): Gemini 3 and
# later refuse a turn's first call without one.
UNSIGNED: Final = "skip_thought_signature_validator"
_VERSION = re.compile(r"gemini-(\d+)")


def signs_calls(model: str) -> bool:
    """Whether the model refuses a function call sent back without its thought signature
    (Gemini 3 and later)."""
    found = _VERSION.match(model.removeprefix("models/"))
    return found is not None and int(found.group(1)) >= 3


def build_request(request: ModelRequest) -> dict[str, Any]:
    """A ``generateContent`` body (without the model, which is in the URL) for one request."""
    contents = to_contents(request.messages, agent_arguments=request.agent_arguments, signed=signs_calls(request.model))
    body: dict[str, Any] = {"contents": contents}
    if request.system:
        body["systemInstruction"] = {"parts": [{"text": request.system}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": to_declarations(request.tools, request.agent_arguments)}]
        body["toolConfig"] = {"functionCallingConfig": _calling_config(request)}
    generation: dict[str, Any] = {"maxOutputTokens": request.max_tokens}
    if request.temperature is not None:
        generation["temperature"] = request.temperature
    if not request.agent_arguments:
        generation["thinkingConfig"] = {"includeThoughts": True}
    body["generationConfig"] = generation
    return body


def sdk_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """A ``generateContent`` body as the SDK's ``contents`` and ``config`` (the SDK takes the
    REST names too: its types accept camelCase), for a normal call or an inline batch request."""
    config: dict[str, Any] = dict(body.get("generationConfig") or {})
    for key in ("systemInstruction", "tools", "toolConfig"):
        if key in body:
            config[key] = body[key]
    return {"contents": body["contents"], "config": config}


def checked_request(request: ModelRequest) -> dict[str, Any]:
    """The request's body; a tool without a Gemini translation is refused as an invalid request
    (tools are checked when they meet a Gemini agent: this is the last line for one that slipped past).

    Raises:
        ProviderError: ``invalid_request``, naming the tool's problem.
    """
    try:
        return build_request(request)
    except UnsupportedSchema as exc:
        raise ProviderError(f"a tool of the request: {exc}", kind=ProviderErrorKind.INVALID_REQUEST) from exc


def batch_entry(custom_id: str, request: ModelRequest) -> bytes:
    """One line of a batch's JSONL input file, as JSON (without its newline)."""
    return orjson.dumps({"key": custom_id, "request": checked_request(request)})


def to_declarations(tools: Sequence[Mapping[str, Any]], agent_arguments: bool = True) -> list[dict[str, Any]]:
    """Our tool schemas as Gemini function declarations (with the agent arguments for the memgpt loops).

    Raises:
        UnsupportedSchema: A tool's parameters have no Gemini translation.
    """
    return [_declaration(tool, agent_arguments) for tool in tools]


@converted_once
def _declaration(tool: Mapping[str, Any], agent_arguments: bool) -> dict[str, Any]:
    parameters = tool.get("parameters") or EMPTY_PARAMETERS
    if agent_arguments:
        parameters = with_agent_arguments(parameters)
    declaration: dict[str, Any] = {"name": tool["name"], "description": tool.get("description") or ""}
    if parameters.get("properties"):  # Gemini refuses an OBJECT with no properties
        declaration["parameters"] = gemini_schema(parameters, where=f"{tool['name']}.parameters")
    return declaration


def _calling_config(request: ModelRequest) -> dict[str, Any]:
    if request.forced_tool is not None:
        return {"mode": "ANY", "allowedFunctionNames": [request.forced_tool]}
    return {"mode": "ANY" if request.require_tool_call else "AUTO"}


def to_contents(
    messages: Sequence[Message], *, agent_arguments: bool = True, signed: bool = False
) -> list[dict[str, Any]]:
    """Our in-context messages (after the system message) as alternating Gemini contents
    (``signed``: the model wants every turn's first call signed, see ``signs_calls``)."""
    turns: list[tuple[str, list[Part]]] = []
    open_calls: dict[str, str] = {}  # the last model turn's calls still unanswered: id -> name
    answered: dict[str, Part] = {}  # their responses so far, by id
    for message in messages:
        if message.role is Role.TOOL:
            call_id = message.tool_call_id or ""
            if call_id in open_calls and call_id not in answered:
                answered[call_id] = _response(open_calls[call_id], message.text, is_error=message.is_error)
                continue
            _add(turns, "user", [{"text": f"{'Tool error' if message.is_error else 'Tool result'}: {message.text}"}])
            continue
        if open_calls:
            _add(turns, "user", _responses(open_calls, answered))
        open_calls, answered = {}, {}
        if message.role is Role.ASSISTANT:
            parts = _model_parts(message, agent_arguments=agent_arguments, signed=signed)
            if parts:
                _add(turns, "model", parts)
                open_calls = {call.id: call.name for call in message.tool_calls}
        else:  # user, and a system message in the middle of the history (Gemini has no such turn)
            parts = [{"text": message.text}] if message.text else []
            _add(turns, "user", parts + [_image(image) for image in message.images])
    if open_calls:
        _add(turns, "user", _responses(open_calls, answered))
    if not turns or turns[0][0] != "user":
        turns.insert(0, ("user", [{"text": FIRST_USER_TURN}]))
    return [{"role": role, "parts": parts} for role, parts in turns]


def _add(turns: list[tuple[str, list[Part]]], role: str, parts: list[Part]) -> None:
    if not parts:
        return
    if turns and turns[-1][0] == role:
        previous = turns[-1][1]
        # Function responses lead their user turn: they answer the model turn just before it.
        responses = [p for p in parts if "functionResponse" in p]
        previous[:] = responses + previous + [p for p in parts if "functionResponse" not in p]
    else:
        turns.append((role, list(parts)))


def _responses(open_calls: Mapping[str, str], answered: Mapping[str, Part]) -> list[Part]:
    """One response per call of the model turn, in the calls' order (a missing one as an error)."""
    return [answered.get(i) or _response(name, MISSING_TOOL_RESULT, is_error=True) for i, name in open_calls.items()]


def _response(name: str, text: str, *, is_error: bool) -> Part:
    return {"functionResponse": {"name": name, "response": {"error" if is_error else "output": text}}}


def _model_parts(message: Message, *, agent_arguments: bool, signed: bool) -> list[Part]:
    parts: list[Part] = [{"text": message.text}] if message.text else []
    for index, call in enumerate(message.tool_calls):
        # The turn's reasoning once, in its first call, as the model wrote it (memgpt loops only).
        reasoning = message.reasoning if index == 0 and agent_arguments else None
        arguments = with_reasoning(call.arguments, reasoning)
        if arguments is None:  # malformed arguments the model wrote: shown as they were
            arguments = {**({"inner_thoughts": reasoning} if reasoning else {}), "arguments": call.arguments}
        part: Part = {"functionCall": {"name": call.name, "args": arguments}}
        signature = call.signature or (UNSIGNED if signed and index == 0 else None)
        if signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    if not parts and message.reasoning and agent_arguments:
        parts.append({"text": message.reasoning})
    return parts


def _image(image: Image) -> Part:
    if image.url:
        return {"fileData": {"mimeType": image.media_type or "image/jpeg", "fileUri": image.url}}
    return {"inlineData": {"mimeType": image.media_type, "data": image.data}}


def parse_response(body: Mapping[str, Any]) -> ModelResponse:
    """A ``GenerateContentResponse`` as JSON as a neutral response (the first candidate)."""
    candidates: list[Mapping[str, Any]] = list(body.get("candidates") or [])
    candidate: Mapping[str, Any] = candidates[0] if candidates else {}
    parts: list[Mapping[str, Any]] = list((candidate.get("content") or {}).get("parts") or [])
    texts = [str(p["text"]) for p in parts if p.get("text") and not p.get("thought")]
    thoughts = "\n".join(str(p["text"]) for p in parts if p.get("text") and p.get("thought")).strip()
    call_parts = [p for p in parts if p.get("functionCall")]
    calls: list[Mapping[str, Any]] = [p["functionCall"] for p in call_parts]
    seed = str(body.get("responseId") or json.dumps(candidate, sort_keys=True))
    splits = [split_agent_arguments(call.get("args") or {}) for call in calls]
    feedback: Mapping[str, Any] = body.get("promptFeedback") or {}
    return ModelResponse(
        tool_calls=tuple(
            ToolCall(
                id=str(call.get("id") or call_id(seed, index)),
                name=str(call.get("name")),
                arguments=split.arguments,
                signature=part.get("thoughtSignature"),
            )
            for index, (part, call, split) in enumerate(zip(call_parts, calls, splits, strict=True))
        ),
        reasoning=joined_reasoning(splits) or thoughts or None,
        request_heartbeat=any(split.request_heartbeat for split in splits),
        text="\n".join(texts) or None,
        usage=parse_usage(body.get("usageMetadata") or {}),
        stop_reason=candidate.get("finishReason") or feedback.get("blockReason"),
        model=body.get("modelVersion"),
        raw=body,
    )


def call_id(seed: str, index: int) -> str:
    """A function call's id: Gemini sends none, and the same answer read again gets the same ids."""
    return f"call_{hashlib.sha256(f'{seed}/{index}'.encode()).hexdigest()[:24]}"


def parse_usage(usage: Mapping[str, Any]) -> Usage:
    """``usageMetadata`` as our usage: cached tokens are taken out of the prompt's, thoughts are output."""
    cached = int(usage.get("cachedContentTokenCount") or 0)
    prompt = int(usage.get("promptTokenCount") or 0) + int(usage.get("toolUsePromptTokenCount") or 0)
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0),
        cache_read_tokens=cached,
    )


# A batch request's error is a ``google.rpc.Status``: its code is the RPC code (its name may be
# given as ``status``); HTTP statuses are read too, for an error given the REST envelope's way.
_STATUS_OF_CODE: Final = {
    1: "CANCELLED",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    11: "OUT_OF_RANGE",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    16: "UNAUTHENTICATED",
    499: "CANCELLED",
    504: "DEADLINE_EXCEEDED",
}
_KIND_OF_STATUS: Final = {
    "INVALID_ARGUMENT": ProviderErrorKind.INVALID_REQUEST,
    "FAILED_PRECONDITION": ProviderErrorKind.INVALID_REQUEST,
    "OUT_OF_RANGE": ProviderErrorKind.INVALID_REQUEST,
    "NOT_FOUND": ProviderErrorKind.NOT_FOUND,
    "PERMISSION_DENIED": ProviderErrorKind.PERMISSION,
    "UNAUTHENTICATED": ProviderErrorKind.AUTHENTICATION,
    "RESOURCE_EXHAUSTED": ProviderErrorKind.RATE_LIMIT,
    "INTERNAL": ProviderErrorKind.API_ERROR,
    "UNAVAILABLE": ProviderErrorKind.OVERLOADED,
    "DEADLINE_EXCEEDED": ProviderErrorKind.TIMEOUT,
}
# The statuses of a batch's requests that never ran (it expired or was cancelled first).
_UNRUN: Final = {"DEADLINE_EXCEEDED": OutcomeStatus.EXPIRED, "CANCELLED": OutcomeStatus.CANCELED}


def parse_result(key: str, line: Mapping[str, Any]) -> tuple[str, BatchOutcome]:
    """One batch result (a line of the result file, or an inline response): ``{"response"}`` or
    ``{"error": {"code", "message"}}``, as ``(key, outcome)``.

    A request the batch never ran before it expired or was cancelled, when it comes back as an
    error saying so, ends as expired or cancelled, as the other providers' unrun requests do (an
    expired one is tried again in the next step).
    """
    response = line.get("response")
    if isinstance(response, Mapping):
        return key, BatchOutcome(status=OutcomeStatus.SUCCEEDED, response=parse_response(response), raw=line)
    error: Mapping[str, Any] = line.get("error") or {}
    unrun = _UNRUN.get(_status_name(error) or "")
    if unrun is not None:
        return key, BatchOutcome(status=unrun, raw=line)
    return key, BatchOutcome(status=OutcomeStatus.ERRORED, error=model_error(error), raw=line)


def model_error(error: Mapping[str, Any]) -> ModelError:
    """A Google error object (``{"code", "message"}``, maybe ``status``) as a request's error."""
    name = _status_name(error)
    code = int(error.get("code") or 0)
    if name in _KIND_OF_STATUS:
        kind = _KIND_OF_STATUS[name]
    else:
        kind = kind_for_status(code) if code >= 100 else ProviderErrorKind.API_ERROR
    message = str(error.get("message") or name or "no response")
    return ModelError(type=kind.value, message=message)


def _status_name(error: Mapping[str, Any]) -> str | None:
    if isinstance(error.get("status"), str):
        return str(error["status"])
    return _STATUS_OF_CODE.get(int(error.get("code") or 0))


class StreamAssembler:
    """The chunks of a streamed ``generateContent`` (each a ``GenerateContentResponse`` as JSON)
    folded into one answer; ``feed`` returns each chunk's deltas (a function call comes whole)."""

    def __init__(self) -> None:
        self._parts: list[dict[str, Any]] = []
        self._last: Mapping[str, Any] = {}
        self._finish: str | None = None
        self._calls = 0

    def feed(self, chunk: Mapping[str, Any]) -> list[TextDelta | ToolCallDelta]:
        """Take one chunk; returns the text and tool-call pieces it holds, in order."""
        self._last = chunk
        out: list[TextDelta | ToolCallDelta] = []
        candidates: list[Mapping[str, Any]] = list(chunk.get("candidates") or [])
        if not candidates:
            return out
        self._finish = candidates[0].get("finishReason") or self._finish
        seed = str(chunk.get("responseId") or "")
        for part in (candidates[0].get("content") or {}).get("parts") or []:
            if part.get("functionCall"):
                call = dict(part["functionCall"])
                call.setdefault("id", call_id(seed or json.dumps(call, sort_keys=True), self._calls))
                signature = {"thoughtSignature": part["thoughtSignature"]} if "thoughtSignature" in part else {}
                self._parts.append({"functionCall": call, **signature})
                arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
                out.append(ToolCallDelta(index=self._calls, id=call["id"], name=call.get("name"), arguments=arguments))
                self._calls += 1
            elif part.get("text"):
                self._parts.append(dict(part))
                if not part.get("thought"):
                    out.append(TextDelta(text=str(part["text"])))
        return out

    def response(self) -> ModelResponse:
        """The answer the stream built (call once it has ended)."""
        texts = [p for p in self._parts if "text" in p and not p.get("thought")]
        thoughts = [p for p in self._parts if p.get("thought")]
        joined: list[Part] = []
        if thoughts:
            joined.append({"text": "".join(p["text"] for p in thoughts), "thought": True})
        if texts:
            joined.append({"text": "".join(p["text"] for p in texts)})
        joined += [p for p in self._parts if "functionCall" in p]
        body = {
            **self._last,
            "candidates": [{"content": {"role": "model", "parts": joined}, "finishReason": self._finish}],
        }
        return parse_response(body)
