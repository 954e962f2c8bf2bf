"""The OpenAI side of the emulator, apart from HTTP: chat completions, batch input files, batch objects.

A chat body is checked as the API checks it (model, messages, tool messages answering the
assistant's tool_calls, tools, tool_choice). A batch input file is validated when the batch is
created: a line that is not JSON, lacks a custom_id, repeats one, is not ``POST`` to the batch's
endpoint, or names another model than the first line, and more than 50,000 lines, make the batch
``failed`` (seen at the first retrieve, after ``validating``). Each line's body is then answered
like ``/v1/chat/completions`` would; a refusal becomes an error-file line with its status code.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

from nightshift.emulator.batches import BatchJob, EndKind, Phase, RequestResult
from nightshift.emulator.config import ScriptedError
from nightshift.emulator.errors import ApiError, invalid, openai_error, status_for
from nightshift.emulator.model import ModelInput, ModelOutput, ToolChoice, ToolSpec, Turn
from nightshift.emulator.state import EmulatorState
from nightshift.emulator.tokens import Segment, count_tokens

ENDPOINT: Final = "/v1/chat/completions"
MAX_REQUESTS: Final = 50_000
_ROLES: Final = ("system", "developer", "user", "assistant", "tool")


def check_body(body: Any) -> Mapping[str, Any]:
    """Refuse a chat body the API would refuse; returns it typed as a mapping.

    Raises:
        ApiError: 400 ``invalid_request_error`` with the parameter.
    """
    if not isinstance(body, Mapping):
        raise invalid("The request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise invalid("you must provide a model parameter", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("Invalid 'messages': empty array. Expected an array with minimum length 1.", param="messages")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise invalid(f"Invalid '{name}': integer below minimum value 1.", param=name)
    if body.get("stream"):
        raise invalid("stream: streaming is not supported by the nightshift emulator", param="stream")
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


def _check_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise invalid("Invalid type for 'tools': expected an array.", param="tools")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(function, Mapping):
            raise invalid(f"Missing required parameter: 'tools[{i}].function'.", param=f"tools[{i}].function")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise invalid(f"Missing required parameter: 'tools[{i}].function.name'.", param=f"tools[{i}].function.name")
        names.add(function["name"])
    return names


def _check_tool_choice(choice: Any, tools: set[str]) -> None:
    if choice is None or choice in ("none", "auto", "required"):
        return
    function = choice.get("function") if isinstance(choice, Mapping) else None
    if not isinstance(function, Mapping) or function.get("name") not in tools:
        raise invalid("Invalid value for 'tool_choice': no tool of the request has that name.", param="tool_choice")


def _check_messages(messages: list[Any]) -> None:
    open_calls: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
            raise invalid(f"Invalid value for 'messages[{i}].role'.", param=f"messages[{i}].role")
        role = message["role"]
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                raise invalid(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            open_calls.remove(message["tool_call_id"])
            continue
        if open_calls:
            raise invalid(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_calls)}",
                param=f"messages.[{i}].role",
            )
        if role == "assistant":
            open_calls = [str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    if open_calls:
        raise invalid(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_calls)}",
            param="messages",
        )


def model_input(body: Mapping[str, Any]) -> ModelInput:
    """What the scripted model reads in a checked chat body."""
    tools = tuple(
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description") or "",
            parameters=t["function"].get("parameters") or {},
        )
        for t in body.get("tools") or []
    )
    system: list[str] = []
    names: dict[str, str] = {}
    turns: list[Turn] = []
    for message in body["messages"]:
        role, text = message["role"], _text(message.get("content"))
        if role in ("system", "developer"):
            system.append(text)
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")))
            turns.append(Turn(role="tool", text=text, tool_name=name))
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            for call in calls:
                names[str(call.get("id"))] = str(call.get("function", {}).get("name"))
            tool_name = calls[0].get("function", {}).get("name") if calls else None
            turns.append(Turn(role="assistant", text=text, tool_name=tool_name))
        else:
            turns.append(Turn(role="user", text=text))
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping):
        tool_choice = ToolChoice(mode="tool", name=choice["function"]["name"])
    elif choice == "none":
        tool_choice = ToolChoice(mode="none")
    elif choice == "required":
        tool_choice = ToolChoice(mode="any")
    else:
        tool_choice = ToolChoice()
    return ModelInput(system="\n".join(system), turns=tuple(turns), tools=tools, tool_choice=tool_choice)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def segments(body: Mapping[str, Any]) -> list[Segment]:
    """The prompt in order; automatic caching keeps the prefix of tools and leading system messages."""
    out = [Segment(text=json.dumps(t, sort_keys=True)) for t in body.get("tools") or []]
    messages = list(body["messages"])
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in ("system", "developer"):
        out.append(Segment(text=_text(messages[lead].get("content"))))
        lead += 1
    if out:
        out[-1] = Segment(text=out[-1].text, breakpoint=True)
    out.extend(Segment(text=json.dumps(m, sort_keys=True)) for m in messages[lead:])
    return out


def run(state: EmulatorState, body: Any, *, custom_id: str | None = None, batch_id: str | None = None) -> RequestResult:
    """Answer one chat completion: the ``chat.completion`` body, or an error body with its status."""
    try:
        checked = check_body(body)
    except ApiError as error:
        return RequestResult(
            ok=False, status=error.status, body=openai_error(error.type, error.message, param=error.param)
        )
    answer = state.answer(model_input(checked), api="openai", body=checked, custom_id=custom_id, batch_id=batch_id)
    if isinstance(answer, ScriptedError):
        message = answer.message or answer.type.replace("_", " ")
        return RequestResult(
            ok=False, status=status_for("openai", answer.type), body=openai_error(answer.type, message)
        )
    prompt = segments(checked)
    usage = state.cache.account(checked["model"], prompt, min_tokens=state.config.cache_min_tokens)
    seed = hashlib.sha256(("".join(s.text for s in prompt) + (custom_id or "")).encode()).hexdigest()
    limit = checked.get("max_completion_tokens") or checked.get("max_tokens")
    completion = _completion(checked["model"], answer, seed=seed, limit=limit)
    prompt_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    completion["usage"].update(
        prompt_tokens=prompt_tokens,
        total_tokens=prompt_tokens + completion["usage"]["completion_tokens"],
        prompt_tokens_details={"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0},
    )
    return RequestResult(ok=True, body=completion)


def _completion(model: str, output: ModelOutput, *, seed: str, limit: int | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": output.text, "refusal": None, "annotations": []}
    finish = "stop"
    if output.tool_name is not None:
        arguments = json.dumps(output.arguments)
        message["tool_calls"] = [
            {
                "id": f"call_{seed[:24]}",
                "type": "function",
                "function": {"name": output.tool_name, "arguments": arguments},
            }
        ]
        finish = "tool_calls"
    tokens = count_tokens(json.dumps(message))
    if limit is not None and tokens > limit:
        # Cut off: the tool call's arguments stop mid-way, as a real model's would.
        for call in message.get("tool_calls", []):
            call["function"]["arguments"] = call["function"]["arguments"][: limit * 4]
        tokens, finish = limit, "length"
    return {
        "id": f"chatcmpl-{seed[24:48]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": tokens,
            "total_tokens": 0,
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": None,
    }


def parse_input_file(data: bytes, endpoint: str) -> tuple[list[tuple[str, Any]], list[dict[str, Any]]]:
    """The ``(custom_id, body)`` of each line of a batch input file, or the validation errors.

    Returns:
        The requests, and the errors ``{"code", "message", "param", "line"}`` (empty when valid).
    """
    requests: list[tuple[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    model: str | None = None

    def fail(line: int, code: str, message: str, param: str | None = None) -> None:
        if len(errors) < 100:
            errors.append({"code": code, "message": message, "param": param, "line": line})

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
        if not isinstance(item, dict):
            fail(number, "invalid_json_line", "This line is not a JSON object.")
            continue
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            fail(number, "missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id")
            continue
        if custom_id in seen:
            fail(
                number,
                "duplicate_custom_id",
                "The custom_id for this request is a duplicate of another request. "
                "The custom_id parameter must be unique for each request in a batch.",
                "custom_id",
            )
            continue
        seen.add(custom_id)
        if item.get("method") != "POST":
            fail(number, "invalid_method", "The method must be POST.", "method")
        elif item.get("url") != endpoint:
            fail(number, "invalid_url", f"The url must be {endpoint}, the endpoint of the batch.", "url")
        elif not isinstance(item.get("body"), dict):
            fail(number, "missing_required_parameter", "Missing required parameter: 'body'.", "body")
        else:
            line_model = item["body"].get("model")
            model = model if model is not None else line_model if isinstance(line_model, str) else None
            if isinstance(line_model, str) and line_model != model:
                fail(
                    number,
                    "mismatched_model",
                    "The provided model for this request does not match the models for other requests in the "
                    "batch. All requests in a batch must use the same model.",
                    "body.model",
                )
            requests.append((custom_id, item["body"]))
    return requests, errors


def status(job: BatchJob) -> str:
    """The batch's OpenAI status word."""
    if job.phase is Phase.CANCELING:
        return "cancelling"
    if job.phase is Phase.ENDED:
        return {
            EndKind.COMPLETED: "completed",
            EndKind.CANCELED: "cancelled",
            EndKind.EXPIRED: "expired",
            EndKind.FAILED: "failed",
        }[job.end_kind or EndKind.COMPLETED]
    if job.failure is not None or job.polls == 0:
        return "validating"
    return "finalizing" if job.finalizing else "in_progress"


def batch_json(job: BatchJob, now: float) -> dict[str, Any]:
    """The ``batch`` object of a batch; ``request_counts`` rise as requests are processed."""
    done = job.done_count(now)
    completed = job.succeeded_count(done)
    word = status(job)
    ended_at = int(job.ended_at) if job.ended_at is not None else None
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for result in job.results[:done]:
        if result.ok:
            usage["input_tokens"] += result.body["usage"]["prompt_tokens"]
            usage["output_tokens"] += result.body["usage"]["completion_tokens"]
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    return {
        "id": job.id,
        "object": "batch",
        "endpoint": job.extra["endpoint"],
        "errors": {"object": "list", "data": job.failure} if job.failure and word == "failed" else None,
        "input_file_id": job.extra["input_file_id"],
        "completion_window": "24h",
        "status": word,
        "output_file_id": job.extra.get("output_file_id"),
        "error_file_id": job.extra.get("error_file_id"),
        "created_at": int(job.created_at),
        "in_progress_at": int(job.created_at) if word not in ("validating", "failed") else None,
        "expires_at": int(job.timing.expires_at),
        "finalizing_at": ended_at if word == "completed" else int(now) if word == "finalizing" else None,
        "completed_at": ended_at if word == "completed" else None,
        "failed_at": ended_at if word == "failed" else None,
        "expired_at": ended_at if word == "expired" else None,
        "cancelling_at": int(job.cancel_started_at) if job.cancel_started_at is not None else None,
        "cancelled_at": ended_at if word == "cancelled" else None,
        "request_counts": {"total": job.total, "completed": completed, "failed": done - completed},
        "metadata": job.extra.get("metadata"),
        "model": job.extra.get("model"),
        "usage": {
            **usage,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def output_lines(job: BatchJob, *, unrun_lines: bool = True) -> tuple[list[bytes], list[bytes]]:
    """The lines of an ended batch's output file and error file.

    Requests that never ran (expired, cancelled) get an error-file line with ``batch_expired`` /
    ``batch_cancelled`` unless ``unrun_lines`` is false.
    """
    output: list[bytes] = []
    errors: list[bytes] = []
    code = "batch_cancelled" if job.end_kind is EndKind.CANCELED else "batch_expired"
    text = (
        "This request was cancelled before it ran."
        if code == "batch_cancelled"
        else "This request could not be executed before the completion window expired."
    )
    for index, custom_id in enumerate(job.custom_ids):
        line: dict[str, Any] = {"id": f"batch_req_{hashlib.sha256(f'{job.id}/{index}'.encode()).hexdigest()[:24]}"}
        line["custom_id"] = custom_id
        if index >= job.processed:
            if unrun_lines:
                line.update(response=None, error={"code": code, "message": text})
                errors.append(json.dumps(line).encode() + b"\n")
            continue
        result = job.results[index]
        request_id = f"req_{hashlib.sha256(line['id'].encode()).hexdigest()[:24]}"
        line.update(response={"status_code": result.status, "request_id": request_id, "body": result.body}, error=None)
        (output if result.ok else errors).append(json.dumps(line).encode() + b"\n")
    return output, errors


def iter_chunks(chunks: list[bytes], size: int = 256) -> Iterator[bytes]:
    """Chunks of a stored file grouped ``size`` at a time, for streaming."""
    for start in range(0, len(chunks), size):
        yield b"".join(chunks[start : start + size])
