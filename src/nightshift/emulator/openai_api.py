"""The OpenAI side of the emulator, apart from HTTP: answering chat completions, batch objects, files.

Bodies are checked first by ``openai_checks`` (what the API refuses). A batch whose input file
``openai_checks.parse_input_file`` refuses is ``failed`` (seen at the first retrieve, after
``validating``); otherwise each line's body is answered like ``/v1/chat/completions`` would, and a
refusal becomes an error-file line with its status code.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from nightshift.emulator.batches import BatchJob, EndKind, Phase, RequestResult
from nightshift.emulator.config import ScriptedError
from nightshift.emulator.errors import ApiError, openai_error, status_for
from nightshift.emulator.model import ModelInput, ModelOutput, ToolChoice, ToolSpec, Turn, call_id_suffix
from nightshift.emulator.openai_checks import check_body
from nightshift.emulator.state import EmulatorState
from nightshift.emulator.tokens import (
    IMAGE_TOKENS,
    Segment,
    context_window_error,
    count_openai_tokens,
    prompt_tokens,
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
            if text or not calls:
                turns.append(Turn(role="assistant", text=text))
            for call in calls:
                name = str(call.get("function", {}).get("name"))
                names[str(call.get("id"))] = name
                turns.append(
                    Turn(role="assistant", text=str(call.get("function", {}).get("arguments")), tool_name=name)
                )
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
    return ModelInput(
        system="\n".join(system),
        turns=tuple(turns),
        tools=tools,
        tool_choice=tool_choice,
        # The API's default lets the model call several tools.
        parallel=body.get("parallel_tool_calls") is not False,
    )


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
    out.extend(_message_segment(m) for m in messages[lead:])
    return out


def _message_segment(message: Mapping[str, Any]) -> Segment:
    """A message as a segment; its images count ``IMAGE_TOKENS`` each, not their URLs' characters."""
    text = json.dumps(message, sort_keys=True)
    content = message.get("content")
    parts = content if isinstance(content, list) else []
    images = sum(1 for p in parts if isinstance(p, Mapping) and p.get("type") == "image_url")
    if not images:
        return Segment(text=text)
    bare = [{"type": "image_url"} if isinstance(p, Mapping) and p.get("type") == "image_url" else p for p in parts]
    rest = count_openai_tokens(json.dumps({**message, "content": bare}, sort_keys=True))
    return Segment(text=text, tokens=rest + IMAGE_TOKENS * images)


def run(state: EmulatorState, body: Any, *, custom_id: str | None = None, batch_id: str | None = None) -> RequestResult:
    """Answer one chat completion: the ``chat.completion`` body, or an error body with its status."""
    try:
        checked = check_body(body)
        too_long = context_window_error(
            "openai",
            window=state.config.context_window(checked["model"]),
            prompt=prompt_tokens(segments(checked), count_openai_tokens),
            max_tokens=checked.get("max_completion_tokens") or checked.get("max_tokens"),
        )
        if too_long is not None:
            raise too_long
    except ApiError as error:
        return RequestResult(
            ok=False,
            status=error.status,
            body=openai_error(error.type, error.message, param=error.param, code=error.code),
        )
    answer = state.answer(model_input(checked), api="openai", body=checked, custom_id=custom_id, batch_id=batch_id)
    if isinstance(answer, ScriptedError):
        message = answer.message or answer.type.replace("_", " ")
        return RequestResult(
            ok=False, status=status_for("openai", answer.type), body=openai_error(answer.type, message)
        )
    prompt = segments(checked)
    usage = state.cache.account(
        checked["model"], prompt, now=state.now(), min_tokens=state.config.cache_min_tokens, counter=count_openai_tokens
    )
    seed = hashlib.sha256(("".join(s.text for s in prompt) + (custom_id or "")).encode()).hexdigest()
    limit = checked.get("max_completion_tokens") or checked.get("max_tokens")
    completion = _completion(checked["model"], answer, seed=seed, limit=limit)
    if checked.get("service_tier") == "flex":
        completion["service_tier"] = "flex"
    counted = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    completion["usage"].update(
        prompt_tokens=counted,
        total_tokens=counted + completion["usage"]["completion_tokens"],
        prompt_tokens_details={"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0},
    )
    return RequestResult(ok=True, body=completion)


def _completion(model: str, output: ModelOutput, *, seed: str, limit: int | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": output.text, "refusal": None, "annotations": []}
    finish = "stop"
    if output.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{call_id_suffix(seed, index)}",
                "type": "function",
                "function": {"name": call.tool_name, "arguments": json.dumps(call.arguments)},
            }
            for index, call in enumerate(output.calls)
        ]
        finish = "tool_calls"
    tokens = count_openai_tokens(json.dumps(message))
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
