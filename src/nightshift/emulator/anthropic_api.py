"""The Anthropic side of the emulator, apart from HTTP: checking params, answering, batch objects.

Params are checked as the Messages API checks them (model, max_tokens, messages, roles, tool_use
and tool_result pairing, tools and tool_choice; ``temperature`` / ``top_p`` / ``top_k`` refused
from API version 2026-10-21 on). In a batch, the request list and custom_ids are checked when the
batch is created (400) and each request's params when it is processed (an ``errored`` result).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from nightshift.emulator.batches import BatchJob, EndKind, Phase, RequestResult
from nightshift.emulator.config import ScriptedError
from nightshift.emulator.errors import ApiError, invalid, status_for
from nightshift.emulator.model import ModelInput, ModelOutput, ToolChoice, ToolSpec, Turn
from nightshift.emulator.state import EmulatorState
from nightshift.emulator.tokens import Segment, count_tokens

STRICT_VERSION: Final = "2026-10-21"  # from this version on, sampling parameters are refused
SAMPLING: Final = ("temperature", "top_p", "top_k")
CUSTOM_ID: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_REQUESTS: Final = 100_000
_TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def check_params(params: Any, *, version: str | None) -> Mapping[str, Any]:
    """Refuse params the Messages API would refuse; returns them typed as a mapping.

    Raises:
        ApiError: 400 ``invalid_request_error`` naming the field.
    """
    if not isinstance(params, Mapping):
        raise invalid("params: Input should be an object")
    model = params.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model: Field required")
    max_tokens = params.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise invalid("max_tokens: Field required")
    if max_tokens < 0:
        raise invalid("max_tokens: Input should be greater than or equal to 0")
    if params.get("stream"):
        raise invalid("stream: streaming is not supported by the nightshift emulator")
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


def _check_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise invalid(f"tools.{i}.name: Field required")
        if not _TOOL_NAME.match(tool["name"]):
            raise invalid(f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping) or schema.get("type") != "object":
            raise invalid(f"tools.{i}.input_schema: should be a JSON schema of type object")
        if tool["name"] in names:
            raise invalid("tools: Tool names must be unique.")
        names.add(tool["name"])
    return names


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


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise invalid("messages: Field required")
    if not messages:
        raise invalid("messages: at least one message is required")
    turns: list[tuple[str, list[Mapping[str, Any]]]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            raise invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        blocks = _blocks(message.get("content"), f"messages.{i}.content")
        # Consecutive turns of one role are combined, as the API does.
        if turns and turns[-1][0] == message["role"]:
            turns[-1][1].extend(blocks)
        else:
            turns.append((message["role"], list(blocks)))
    if turns[0][0] != "user":
        raise invalid("messages: the first message must use the user role")
    for index, (role, blocks) in enumerate(turns):
        calls = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if role == "user" and results:
            previous = turns[index - 1][1] if index > 0 else []
            asked = {b.get("id") for b in previous if b.get("type") == "tool_use"}
            stray = [r for r in results if r not in asked]
            if stray:
                raise invalid(
                    f"messages.{index}.content: unexpected `tool_use_id` found in `tool_result` blocks: {stray[0]}. "
                    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )
        if role == "assistant" and calls:
            following = turns[index + 1][1] if index + 1 < len(turns) else []
            answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
            open_calls = [c for c in calls if c not in answered]
            if open_calls:
                raise invalid(
                    f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(map(str, open_calls))}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )


def _blocks(content: Any, where: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise invalid(f"{where}: Input should be a string or a list of content blocks")
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise invalid(f"{where}.{j}.type: Field required")
        if block["type"] == "text" and not block.get("text"):
            raise invalid(f"{where}.{j}.text: text content blocks must be non-empty")
    return list(content)


def model_input(params: Mapping[str, Any]) -> ModelInput:
    """What the scripted model reads in checked params."""
    tools = tuple(
        ToolSpec(name=t["name"], description=t.get("description") or "", parameters=t.get("input_schema") or {})
        for t in params.get("tools") or []
    )
    names: dict[str, str] = {}
    turns: list[Turn] = []
    for message in params["messages"]:
        for block in _blocks(message.get("content"), "content"):
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
    out = [
        Segment(text=json.dumps(t, sort_keys=True), breakpoint="cache_control" in t) for t in params.get("tools") or []
    ]
    system = params.get("system")
    if isinstance(system, str) and system:
        out.append(Segment(text=system))
    elif isinstance(system, list):
        out.extend(Segment(text=str(b.get("text") or ""), breakpoint="cache_control" in b) for b in system)
    for message in params["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            out.append(Segment(text=content))
        else:
            out.extend(Segment(text=json.dumps(b, sort_keys=True), breakpoint="cache_control" in b) for b in content)
    return out


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
        checked = check_params(params, version=version)
    except ApiError as error:
        return RequestResult(ok=False, status=error.status, body={"type": error.type, "message": error.message})
    answer = state.answer(model_input(checked), api="anthropic", body=checked, custom_id=custom_id, batch_id=batch_id)
    if isinstance(answer, ScriptedError):
        message = answer.message or _ERROR_TEXT.get(answer.type, answer.type.replace("_", " "))
        return RequestResult(
            ok=False, status=status_for("anthropic", answer.type), body={"type": answer.type, "message": message}
        )
    prompt = segments(checked)
    usage = state.cache.account(checked["model"], prompt, min_tokens=state.config.cache_min_tokens)
    seed = hashlib.sha256(("".join(s.text for s in prompt) + (custom_id or "")).encode()).hexdigest()
    message_body = _message(checked, answer, seed=seed, tier="batch" if custom_id is not None else "standard")
    message_body["usage"].update(
        input_tokens=usage.input_tokens,
        cache_read_input_tokens=usage.cache_read_tokens,
        cache_creation_input_tokens=usage.cache_write_tokens,
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
    if output.tool_name is not None:
        content.append(
            {"type": "tool_use", "id": f"toolu_{seed[:24]}", "name": output.tool_name, "input": output.arguments}
        )
    output_tokens = count_tokens(json.dumps(content))
    stop = "tool_use" if output.tool_name is not None else "end_turn"
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
            "service_tier": tier,
        },
    }


def check_batch(body: Any) -> list[tuple[str, Any]]:
    """The ``(custom_id, params)`` of a batch create body, refusing what the API refuses at once.

    Raises:
        ApiError: 400 for a missing or empty request list, too many requests, a custom_id that
            does not match ``^[a-zA-Z0-9_-]{1,64}$`` or appears twice.
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
        if not CUSTOM_ID.match(custom_id):
            raise invalid(f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if custom_id in seen:
            raise invalid(f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r}; custom_ids must be unique")
        if "params" not in request:
            raise invalid(f"requests.{i}.params: Field required")
        seen.add(custom_id)
        out.append((custom_id, request["params"]))
    return out


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
