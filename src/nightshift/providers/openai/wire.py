"""OpenAI wire format: our requests to Chat Completions bodies and Batch input lines, and back.

Pure functions over plain JSON values. What they guarantee about the request: the system prompt
is the first message; an assistant message carries its tool calls with the reasoning as the
``inner_thoughts`` argument; a tool result is a ``role: tool`` message answering a call of the
assistant message before it (an orphan result becomes user text, a call without a result gets an
error result, because the API refuses either); tool-call ids are at most 40 characters (longer
stored ids, such as other providers' or old greetings', get a stable stand-in: ``tool_call_ids``);
a tool description is cut to the API's 1,024 characters; a tool call is required with
``tool_choice``, and ``parallel_tool_calls`` says whether the model may make several. Several calls
of one turn are the ``tool_calls`` of one assistant message (the reasoning goes into the first
one's ``inner_thoughts``), each answered by its own ``tool`` message.

With ``ModelRequest.agent_arguments`` off (letta_v1 agents) the tools go as they are and past
reasoning is not sent back; the reasoning of an answer is then the model's own, where it gives it
(``reasoning_content``).

Batch results: successes are lines of the output file, HTTP-level failures and requests that never
ran (``batch_expired`` / ``batch_cancelled``) lines of the error file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.domain.usage import Usage
from nightshift.errors import ProviderErrorKind
from nightshift.providers.agent_arguments import (
    joined_reasoning,
    split_agent_arguments,
    with_agent_arguments,
    with_reasoning,
)
from nightshift.providers.base import (
    MISSING_TOOL_RESULT,
    BatchCounts,
    BatchOutcome,
    BatchState,
    BatchStatus,
    ModelError,
    ModelRequest,
    ModelResponse,
    OutcomeStatus,
    TextDelta,
    ToolCallDelta,
)
from nightshift.providers.errors import kind_for_status
from nightshift.providers.tool_call_ids import openai_tool_call_id
from nightshift.providers.tool_lists import converted_once

ENDPOINT: Final = "/v1/chat/completions"
EXPIRED_CODE: Final = "batch_expired"
CANCELLED_CODE: Final = "batch_cancelled"
MAX_DESCRIPTION: Final = 1024  # the API refuses a longer function description


def build_request(request: ModelRequest) -> dict[str, Any]:
    """A Chat Completions request body for one request."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(to_messages(request.messages, agent_arguments=request.agent_arguments))
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "max_completion_tokens": request.max_tokens,
    }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = to_tools(request.tools, agent_arguments=request.agent_arguments)
        body["tool_choice"] = _tool_choice(request)
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.flex:
        body["service_tier"] = "flex"
    return body


def batch_entry(custom_id: str, request: ModelRequest) -> bytes:
    """One line of a Batch input file (``/v1/chat/completions``) for one request, as JSON
    (without its newline)."""
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": build_request(request)})


def to_tools(tools: Sequence[Mapping[str, Any]], *, agent_arguments: bool = True) -> list[dict[str, Any]]:
    """Our tool schemas ``{name, description, parameters}`` as OpenAI function tools, with the
    agent arguments when ``agent_arguments`` (the memgpt loops), else as they are.

    A description longer than the API's 1,024 characters is cut there (the model reads its start)
    rather than having every request of the agent refused.
    """
    return [_function(t, agent_arguments) for t in tools]


@converted_once
def _function(tool: Mapping[str, Any], agent_arguments: bool) -> dict[str, Any]:
    parameters = tool.get("parameters")
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": (tool.get("description") or "")[:MAX_DESCRIPTION],
            "parameters": (
                with_agent_arguments(parameters)
                if agent_arguments
                else dict(parameters or {"type": "object", "properties": {}})
            ),
        },
    }


def _tool_choice(request: ModelRequest) -> str | dict[str, Any]:
    if request.forced_tool is not None:
        return {"type": "function", "function": {"name": request.forced_tool}}
    return "required" if request.require_tool_call else "auto"


def to_messages(messages: Sequence[Message], *, agent_arguments: bool = True) -> list[dict[str, Any]]:
    """Our in-context messages (after the system message) as Chat Completions messages.

    Without ``agent_arguments`` (letta_v1) past reasoning is not shown: the API takes none back.
    """
    out: list[dict[str, Any]] = []
    open_calls: list[str] = []  # calls of the last assistant message still waiting for a result
    for message in messages:
        if message.role is Role.TOOL:
            if message.tool_call_id in open_calls:
                open_calls.remove(message.tool_call_id)
                out.append(
                    {"role": "tool", "tool_call_id": openai_tool_call_id(message.tool_call_id), "content": message.text}
                )
            else:
                _close(open_calls, out)
                label = "Tool error" if message.is_error else "Tool result"
                out.append({"role": "user", "content": f"{label}: {message.text}"})
            continue
        _close(open_calls, out)
        if message.role is Role.ASSISTANT:
            converted = _assistant(message, agent_arguments=agent_arguments)
            if converted is not None:
                out.append(converted)
                open_calls = [call.id for call in message.tool_calls]
        elif message.images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
            parts += [{"type": "image_url", "image_url": {"url": image.data_url()}} for image in message.images]
            out.append({"role": "user", "content": parts})
        elif message.text:
            out.append({"role": message.role.value, "content": message.text})
    _close(open_calls, out)
    return out


def _close(open_calls: list[str], out: list[dict[str, Any]]) -> None:
    for call_id in open_calls:
        out.append({"role": "tool", "tool_call_id": openai_tool_call_id(call_id), "content": MISSING_TOOL_RESULT})
    open_calls.clear()


def _assistant(message: Message, *, agent_arguments: bool) -> dict[str, Any] | None:
    # The turn's reasoning once, in its first call, as the model wrote it (memgpt loops only).
    reasoning = message.reasoning if agent_arguments else None
    calls = [_call(call, reasoning if i == 0 else None) for i, call in enumerate(message.tool_calls)]
    content = message.text or (reasoning if not calls else None) or None
    if not calls and content is None:
        return None
    converted: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        converted["tool_calls"] = calls
    return converted


def _call(call: ToolCall, reasoning: str | None) -> dict[str, Any]:
    arguments = with_reasoning(call.arguments, reasoning)
    text = call.arguments if arguments is None else json.dumps(arguments, ensure_ascii=False)
    return {"id": openai_tool_call_id(call.id), "type": "function", "function": {"name": call.name, "arguments": text}}


def parse_completion(body: Mapping[str, Any]) -> ModelResponse:
    """A Chat Completions response body as a neutral response (the first choice, all its tool calls)."""
    choices: list[Mapping[str, Any]] = list(body.get("choices") or [])
    choice: Mapping[str, Any] = choices[0] if choices else {}
    message: Mapping[str, Any] = choice.get("message") or {}
    calls: list[Mapping[str, Any]] = list(message.get("tool_calls") or [])
    functions: list[Mapping[str, Any]] = [call.get("function") or {} for call in calls]
    splits = [
        split_agent_arguments(raw if isinstance(raw := function.get("arguments"), str | dict) else "")
        for function in functions
    ]
    return ModelResponse(
        tool_calls=tuple(
            ToolCall(id=str(call.get("id")), name=str(function.get("name")), arguments=split.arguments)
            for call, function, split in zip(calls, functions, splits, strict=True)
        ),
        reasoning=joined_reasoning(splits) or _native_reasoning(message),
        request_heartbeat=any(split.request_heartbeat for split in splits),
        text=message.get("content") or message.get("refusal") or None,
        usage=parse_usage(body.get("usage") or {}),
        stop_reason=choice.get("finish_reason"),
        model=body.get("model"),
        raw=body,
    )


def _native_reasoning(message: Mapping[str, Any]) -> str | None:
    """The reasoning a model returned beside its answer (``reasoning_content``, as OpenAI-compatible
    reasoning models send it), for a letta_v1 agent whose tools carry no ``inner_thoughts``."""
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) and value.strip() else None


class StreamAssembler:
    """The chunks of a streamed chat completion (``stream: true``), folded into the completion.

    ``feed`` takes each ``chat.completion.chunk`` as JSON and returns the deltas of its first
    choice; with ``stream_options.include_usage`` the last chunk (no choices) brings the usage.
    ``response`` is the whole answer, parsed as ``parse_completion`` parses a non-streamed one.
    """

    def __init__(self) -> None:
        self._body: dict[str, Any] = {}
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None

    def feed(self, chunk: Mapping[str, Any]) -> list[TextDelta | ToolCallDelta]:
        """Take one chunk; returns the text and tool-call pieces it holds, in order."""
        for key in ("id", "model", "created"):
            if chunk.get(key) is not None:
                self._body[key] = chunk[key]
        if chunk.get("usage"):
            self._body["usage"] = chunk["usage"]
        out: list[TextDelta | ToolCallDelta] = []
        for choice in chunk.get("choices") or []:
            if int(choice.get("index") or 0) != 0:
                continue  # nightshift asks for one choice
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
            delta: Mapping[str, Any] = choice.get("delta") or {}
            if delta.get("content"):
                self._text.append(delta["content"])
                out.append(TextDelta(text=delta["content"]))
            if delta.get("refusal"):
                self._refusal.append(delta["refusal"])
            if isinstance(delta.get("reasoning_content"), str):
                self._reasoning.append(delta["reasoning_content"])
            for piece in delta.get("tool_calls") or []:
                index = int(piece.get("index") or 0)
                call = self._calls.setdefault(index, {"id": None, "type": "function", "name": "", "arguments": []})
                function: Mapping[str, Any] = piece.get("function") or {}
                if piece.get("id"):
                    call["id"] = piece["id"]
                if function.get("name"):
                    call["name"] += function["name"]
                arguments = str(function.get("arguments") or "")
                call["arguments"].append(arguments)
                if piece.get("id") or function.get("name") or arguments:
                    out.append(
                        ToolCallDelta(index=index, id=piece.get("id"), name=function.get("name"), arguments=arguments)
                    )
        return out

    def response(self) -> ModelResponse:
        """The answer the stream built (call once it has ended)."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._text) or None,
            "refusal": "".join(self._refusal) or None,
            "reasoning_content": "".join(self._reasoning) or None,
        }
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self._calls.items())
            ]
        body = {**self._body, "choices": [{"index": 0, "message": message, "finish_reason": self._finish}]}
        return parse_completion(body)


def parse_usage(usage: Mapping[str, Any]) -> Usage:
    """OpenAI ``usage`` as our usage; cached prompt tokens are taken out of ``input_tokens``."""
    details: Mapping[str, Any] = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    return Usage(
        input_tokens=max(int(usage.get("prompt_tokens") or 0) - cached - written, 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def parse_result_line(line: Mapping[str, Any]) -> tuple[str, BatchOutcome]:
    """One line of a batch's output or error file as ``(custom_id, outcome)``."""
    custom_id = str(line.get("custom_id"))
    response: Mapping[str, Any] | None = line.get("response")
    if response is not None:
        status = int(response.get("status_code") or 0)
        body: Mapping[str, Any] = response.get("body") or {}
        if status == 200:
            return custom_id, BatchOutcome(status=OutcomeStatus.SUCCEEDED, response=parse_completion(body), raw=line)
        detail: Mapping[str, Any] = body.get("error") or {}
        error = ModelError(type=kind_for_status(status), message=str(detail.get("message") or f"HTTP {status}"))
        return custom_id, BatchOutcome(status=OutcomeStatus.ERRORED, error=error, raw=line)
    failure: Mapping[str, Any] = line.get("error") or {}
    code = failure.get("code")
    if code == EXPIRED_CODE:
        return custom_id, BatchOutcome(status=OutcomeStatus.EXPIRED, raw=line)
    if code == CANCELLED_CODE:
        return custom_id, BatchOutcome(status=OutcomeStatus.CANCELED, raw=line)
    error = ModelError(
        type=ProviderErrorKind.API_ERROR.value, message=str(failure.get("message") or code or "no response")
    )
    return custom_id, BatchOutcome(status=OutcomeStatus.ERRORED, error=error, raw=line)


def missing_outcome(batch: BatchStatus) -> BatchOutcome:
    """The outcome of a request of an ended batch that has no line in the output or error file."""
    if batch.provider_status == "expired":
        return BatchOutcome(status=OutcomeStatus.EXPIRED)
    if batch.provider_status == "cancelled":
        return BatchOutcome(status=OutcomeStatus.CANCELED)
    if batch.error is not None:
        return BatchOutcome(
            status=OutcomeStatus.ERRORED,
            error=ModelError(type=ProviderErrorKind.INVALID_REQUEST.value, message=batch.error),
        )
    message = f"the batch ended ({batch.provider_status}) without a result for this request"
    return BatchOutcome(
        status=OutcomeStatus.ERRORED, error=ModelError(type=ProviderErrorKind.API_ERROR.value, message=message)
    )


_STATES: Final = {
    "validating": BatchState.IN_PROGRESS,
    "in_progress": BatchState.IN_PROGRESS,
    "finalizing": BatchState.IN_PROGRESS,
    "cancelling": BatchState.CANCELING,
}


def parse_batch(batch: Mapping[str, Any]) -> BatchStatus:
    """A ``batch`` object as JSON as our batch status.

    While the batch runs, requests without a result are ``processing``; once it ended they are
    expired (``expired``), canceled (``cancelled``) or errored (``failed``).
    """
    status = str(batch.get("status"))
    state = _STATES.get(status, BatchState.ENDED)
    raw_counts: Mapping[str, Any] = batch.get("request_counts") or {}
    total = int(raw_counts.get("total") or 0)
    completed = int(raw_counts.get("completed") or 0)
    failed = int(raw_counts.get("failed") or 0)
    rest = max(total - completed - failed, 0)
    if state is not BatchState.ENDED:
        counts = BatchCounts(processing=rest, succeeded=completed, errored=failed)
    elif status == "expired":
        counts = BatchCounts(succeeded=completed, errored=failed, expired=rest)
    elif status == "cancelled":
        counts = BatchCounts(succeeded=completed, errored=failed, canceled=rest)
    else:
        counts = BatchCounts(succeeded=completed, errored=failed + rest)
    ended = next((batch[k] for k in ("completed_at", "failed_at", "expired_at", "cancelled_at") if batch.get(k)), None)
    return BatchStatus(
        id=str(batch["id"]),
        state=state,
        counts=counts,
        provider_status=status,
        created_at=_time(batch["created_at"]),
        expires_at=_time(batch["expires_at"]) if batch.get("expires_at") else None,
        ended_at=_time(ended) if ended is not None and state is BatchState.ENDED else None,
        error=_batch_error(batch) if status == "failed" else None,
    )


def _batch_error(batch: Mapping[str, Any]) -> str:
    errors: Mapping[str, Any] = batch.get("errors") or {}
    parts = []
    for item in errors.get("data") or []:
        where = f"line {item['line']}: " if item.get("line") is not None else ""
        parts.append(f"{where}{item.get('message') or item.get('code')}")
    return "; ".join(parts) or "the provider refused the batch"


def _time(value: Any) -> datetime:
    return datetime.fromtimestamp(int(value), tz=UTC)
