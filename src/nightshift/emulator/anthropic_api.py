"""The Anthropic side of the emulator, apart from HTTP: answering Messages requests, batch objects.

Params are checked first by ``anthropic_checks`` (what the API refuses); a refused request is a
400, or in a batch an ``errored`` result with ``invalid_request_error``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from nightshift.emulator.anthropic_checks import check_params, content_blocks
from nightshift.emulator.batches import BatchJob, EndKind, Phase, RequestResult
from nightshift.emulator.config import ScriptedError
from nightshift.emulator.errors import ApiError, status_for
from nightshift.emulator.model import ModelInput, ModelOutput, ToolChoice, ToolSpec, Turn, call_id_suffix
from nightshift.emulator.state import EmulatorState
from nightshift.emulator.tokens import IMAGE_TOKENS, Segment, context_window_error, count_tokens, prompt_tokens


def model_input(params: Mapping[str, Any]) -> ModelInput:
    """What the scripted model reads in checked params."""
    tools = tuple(
        ToolSpec(name=t["name"], description=t.get("description") or "", parameters=t.get("input_schema") or {})
        for t in params.get("tools") or []
    )
    names: dict[str, str] = {}
    turns: list[Turn] = []
    for message in params["messages"]:
        for block in content_blocks(message.get("content"), "content"):
            kind = block["type"]
            if kind == "text":
                turns.append(Turn(role=message["role"], text=str(block.get("text") or "")))
            elif kind == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
                turns.append(Turn(role="assistant", text=json.dumps(block.get("input")), tool_name=block.get("name")))
            elif kind == "tool_result":
                turns.append(
                    Turn(
                        role="tool",
                        text=_result_text(block.get("content")),
                        tool_name=names.get(str(block.get("tool_use_id"))),
                        is_error=bool(block.get("is_error")),
                    )
                )
    choice: Mapping[str, Any] = params.get("tool_choice") or {"type": "auto"}
    return ModelInput(
        system=_system_text(params.get("system")),
        turns=tuple(turns),
        tools=tools,
        tool_choice=ToolChoice(mode=choice["type"], name=choice.get("name")),
        parallel=not choice.get("disable_parallel_tool_use", False),
    )


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(b.get("text") or "") for b in content if isinstance(b, Mapping))
    return "" if content is None else str(content)


def _system_text(system: Any) -> str:
    if isinstance(system, list):
        return "\n".join(str(b.get("text") or "") for b in system)
    return system or ""


def segments(params: Mapping[str, Any]) -> list[Segment]:
    """The prompt in cache order (tools, system, messages), breakpoints where ``cache_control`` is."""
    out = [_segment(_unmarked(t), t) for t in params.get("tools") or []]
    system = params.get("system")
    if isinstance(system, str) and system:
        out.append(Segment(text=system))
    elif isinstance(system, list):
        out.extend(_segment(str(b.get("text") or ""), b) for b in system)
    for message in params["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            out.append(Segment(text=content))
        else:
            out.extend(_segment(_unmarked(b), b) for b in content)
    return out


def _unmarked(block: Mapping[str, Any]) -> str:
    """A block's text as the cache knows it: its mark is not part of what is cached."""
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)


def _segment(text: str, block: Mapping[str, Any]) -> Segment:
    tokens = IMAGE_TOKENS if block.get("type") == "image" else None
    control = block.get("cache_control")
    if not isinstance(control, Mapping):
        return Segment(text=text, tokens=tokens)
    return Segment(text=text, breakpoint=True, ttl=str(control.get("ttl") or "5m"), tokens=tokens)


def run(
    state: EmulatorState,
    params: Any,
    *,
    version: str | None,
    custom_id: str | None = None,
    batch_id: str | None = None,
) -> RequestResult:
    """Answer one Messages request: a ``message`` body, or an error with its status.

    Args:
        state: The emulator state (scripts, knobs, prompt cache).
        params: The request body (or a batch request's ``params``), unchecked.
        version: The ``anthropic-version`` header.
        custom_id: The batch request's custom_id; None for a normal call.
        batch_id: The batch it belongs to.

    Returns:
        The result; ``body`` is the message, or ``{"type", "message"}`` of the error.
    """
    try:
        checked = check_params(params, version=version, allow_stream=custom_id is None)
        too_long = context_window_error(
            "anthropic",
            window=state.config.context_window(checked["model"]),
            prompt=prompt_tokens(segments(checked)),
            max_tokens=checked["max_tokens"],
        )
        if too_long is not None:
            raise too_long
    except ApiError as error:
        return RequestResult(ok=False, status=error.status, body={"type": error.type, "message": error.message})
    answer = state.answer(model_input(checked), api="anthropic", body=checked, custom_id=custom_id, batch_id=batch_id)
    if isinstance(answer, ScriptedError):
        message = answer.message or _ERROR_TEXT.get(answer.type, answer.type.replace("_", " "))
        return RequestResult(
            ok=False, status=status_for("anthropic", answer.type), body={"type": answer.type, "message": message}
        )
    prompt = segments(checked)
    usage = state.cache.account(checked["model"], prompt, now=state.now(), min_tokens=state.config.cache_min_tokens)
    seed = hashlib.sha256(("".join(s.text for s in prompt) + (custom_id or "")).encode()).hexdigest()
    message_body = _message(checked, answer, seed=seed, tier="batch" if custom_id is not None else "standard")
    message_body["usage"].update(
        input_tokens=usage.input_tokens,
        cache_read_input_tokens=usage.cache_read_tokens,
        cache_creation_input_tokens=usage.cache_write_tokens,
        # The writes by lifetime, as the real API reports them.
        cache_creation={
            "ephemeral_5m_input_tokens": usage.cache_write_5m_tokens,
            "ephemeral_1h_input_tokens": usage.cache_write_1h_tokens,
        },
    )
    return RequestResult(ok=True, body=message_body)


_ERROR_TEXT: Final = {
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit.",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
    "invalid_request_error": "Invalid request",
}


def _message(params: Mapping[str, Any], output: ModelOutput, *, seed: str, tier: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if output.text:
        content.append({"type": "text", "text": output.text})
    for index, call in enumerate(output.calls):
        wire_id = f"toolu_{call_id_suffix(seed, index)}"
        content.append({"type": "tool_use", "id": wire_id, "name": call.tool_name, "input": call.arguments})
    output_tokens = count_tokens(json.dumps(content))
    stop = "tool_use" if output.calls else "end_turn"
    if output_tokens > params["max_tokens"]:
        # Cut off like a real model: no complete tool call, the text up to the limit.
        text = (output.text or json.dumps(output.arguments))[: max(params["max_tokens"], 0) * 4]
        content = [{"type": "text", "text": text}] if text else []
        output_tokens, stop = params["max_tokens"], "max_tokens"
    return {
        "id": f"msg_{seed[24:48]}",
        "type": "message",
        "role": "assistant",
        "model": params["model"],
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 0,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "service_tier": tier,
        },
    }


def rfc3339(timestamp: float | None) -> str | None:
    """A unix time as RFC 3339 text (UTC, ``Z``)."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def batch_json(job: BatchJob) -> dict[str, Any]:
    """The ``message_batch`` object of a batch. Counts move out of ``processing`` only at the end."""
    ended = job.phase is Phase.ENDED
    counts = {"processing": job.total, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    if ended:
        succeeded = job.succeeded_count(job.processed)
        rest = job.total - job.processed
        counts = {
            "processing": 0,
            "succeeded": succeeded,
            "errored": job.processed - succeeded,
            "canceled": rest if job.end_kind is EndKind.CANCELED else 0,
            "expired": rest if job.end_kind is not EndKind.CANCELED else 0,
        }
    status = {Phase.RUNNING: "in_progress", Phase.CANCELING: "canceling", Phase.ENDED: "ended"}[job.phase]
    return {
        "id": job.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": counts,
        "created_at": rfc3339(job.created_at),
        "expires_at": rfc3339(job.timing.expires_at),
        "ended_at": rfc3339(job.ended_at),
        "cancel_initiated_at": rfc3339(job.cancel_started_at),
        "archived_at": None,
        "results_url": f"/v1/messages/batches/{job.id}/results" if ended else None,
    }


def result_lines(job: BatchJob) -> Iterator[bytes]:
    """The results JSONL of an ended batch, one line (with its single newline) at a time."""
    missing = {"type": "canceled" if job.end_kind is EndKind.CANCELED else "expired"}
    for index, custom_id in enumerate(job.custom_ids):
        if index >= job.processed:
            result: dict[str, Any] = missing
        else:
            answer = job.results[index]
            if answer.ok:
                result = {"type": "succeeded", "message": answer.body}
            else:
                result = {"type": "errored", "error": {"type": "error", "error": answer.body}}
        yield json.dumps({"custom_id": custom_id, "result": result}).encode() + b"\n"
