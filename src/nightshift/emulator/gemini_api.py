"""The Gemini side of the emulator, apart from HTTP: answering ``generateContent``, batches, files.

Bodies are checked first by ``gemini_checks`` (what the API refuses). A batch's requests, inline
or the lines of an uploaded JSONL file, are each answered like ``generateContent`` when the
batch is created; a request refused or failed is an error entry of its own (a
``google.rpc.Status``), never the batch's failure. A batch is a long-running operation whose
``metadata`` is the ``GenerateContentBatch`` (state, times, stats and, once ended, its output:
inline responses in request order, or a result file's name), as the SDK reads it.

The scripted model reads JSON Schema types in lower case; Gemini's schemas name them in upper
case, so tools' parameters are read back into JSON Schema here.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from nightshift.emulator.batches import BatchJob, EndKind, Phase, RequestResult
from nightshift.emulator.config import ScriptedError
from nightshift.emulator.errors import ApiError, google_error, rpc_code, rpc_status, status_for
from nightshift.emulator.gemini_checks import check_body, check_signatures, signs_calls
from nightshift.emulator.model import ModelInput, ModelOutput, ToolChoice, ToolSpec, Turn
from nightshift.emulator.state import EmulatorState, StoredFile
from nightshift.emulator.streams import pieces
from nightshift.emulator.tokens import Segment, context_window_error, count_tokens, prompt_tokens

BATCH_TYPE: Final = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
OUTPUT_TYPE: Final = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
# What a request a batch never ran ends with, by how the batch ended.
_UNRUN: Final = {
    EndKind.EXPIRED: ("timeout_error", "The batch expired before this request ran."),
    EndKind.CANCELED: ("cancelled", "The batch was cancelled before this request ran."),
}


def model_input(body: Mapping[str, Any]) -> ModelInput:
    """What the scripted model reads in a checked ``generateContent`` body."""
    system = "\n".join(str(p.get("text") or "") for p in (body.get("systemInstruction") or {}).get("parts") or [])
    turns: list[Turn] = []
    for content in body["contents"]:
        for part in content.get("parts") or []:
            turns.extend(_part_turns(content.get("role") or "user", part))
    declarations = [d for tool in body.get("tools") or [] for d in tool.get("functionDeclarations") or []]
    tools = tuple(
        ToolSpec(
            name=d["name"],
            description=d.get("description") or "",
            parameters=d.get("parametersJsonSchema") or json_schema(d.get("parameters") or {}),
        )
        for d in declarations
    )
    return ModelInput(system=system, turns=tuple(turns), tools=tools, tool_choice=_tool_choice(body), parallel=True)


def _part_turns(role: str, part: Mapping[str, Any]) -> list[Turn]:
    if part.get("thought"):
        return []
    if "functionCall" in part:
        call = part["functionCall"]
        return [Turn(role="assistant", text=json.dumps(call.get("args") or {}), tool_name=call.get("name"))]
    if "functionResponse" in part:
        answer = part["functionResponse"]
        response = answer.get("response") or {}
        is_error = "error" in response and "output" not in response
        text = response.get("error" if is_error else "output", response)
        return [
            Turn(
                role="tool",
                text=text if isinstance(text, str) else json.dumps(text),
                tool_name=answer.get("name"),
                is_error=is_error,
            )
        ]
    if "text" in part:
        return [Turn(role="assistant" if role == "model" else "user", text=str(part["text"]))]
    return []


def json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A Gemini Schema as JSON Schema: its types in lower case, ``nullable`` folded into the type."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out["type"] = value.lower()
        elif key == "properties" and isinstance(value, Mapping):
            out["properties"] = {name: json_schema(item) for name, item in value.items()}
        elif key == "items" and isinstance(value, Mapping):
            out["items"] = json_schema(value)
        elif key == "anyOf" and isinstance(value, list):
            out["anyOf"] = [json_schema(item) for item in value]
        elif key != "nullable":
            out[key] = value
    if schema.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _tool_choice(body: Mapping[str, Any]) -> ToolChoice:
    config = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    mode = config.get("mode", "AUTO")
    allowed = config.get("allowedFunctionNames") or []
    if mode in ("ANY", "VALIDATED") and len(allowed) == 1:
        return ToolChoice(mode="tool", name=allowed[0])
    if mode == "ANY":
        return ToolChoice(mode="any")
    if mode == "NONE":
        return ToolChoice(mode="none")
    return ToolChoice()


def segments(body: Mapping[str, Any]) -> list[Segment]:
    """The prompt in order; implicit caching keeps the prefix of system instruction and tools."""
    out = [Segment(text=json.dumps(body["systemInstruction"], sort_keys=True))] if "systemInstruction" in body else []
    out.extend(Segment(text=json.dumps(tool, sort_keys=True)) for tool in body.get("tools") or [])
    if out:
        out[-1] = Segment(text=out[-1].text, breakpoint=True)
    out.extend(Segment(text=json.dumps(content, sort_keys=True)) for content in body["contents"])
    return out


def run(
    state: EmulatorState, body: Any, *, model: str, custom_id: str | None = None, batch_id: str | None = None
) -> RequestResult:
    """Answer one ``generateContent``: the response, or Google's error body with its HTTP status."""
    try:
        checked = check_body(body)
        check_signatures(checked, model)
        too_long = context_window_error(
            "gemini",
            window=state.config.context_window(model),
            prompt=prompt_tokens(segments(checked)),
            max_tokens=None,
        )
        if too_long is not None:
            raise too_long
    except ApiError as error:
        return RequestResult(
            ok=False, status=error.status, body=google_error(error.type, error.message, details=error.details)
        )
    answer = state.answer(model_input(checked), api="gemini", body=checked, custom_id=custom_id, batch_id=batch_id)
    if isinstance(answer, ScriptedError):
        message = answer.message or answer.type.replace("_", " ")
        return RequestResult(
            ok=False, status=status_for("gemini", answer.type), body=google_error(answer.type, message)
        )
    prompt = segments(checked)
    usage = state.cache.account(
        model, prompt, now=state.now(), min_tokens=state.config.cache_min_tokens, counter=count_tokens
    )
    seed = hashlib.sha256(("".join(s.text for s in prompt) + (custom_id or "")).encode()).hexdigest()
    generation = checked.get("generationConfig") or {}
    thinking = bool((generation.get("thinkingConfig") or {}).get("includeThoughts"))
    response = _response(model, answer, seed=seed, limit=generation.get("maxOutputTokens"), thoughts=thinking)
    prompt_count = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    metadata = response["usageMetadata"]
    metadata["promptTokenCount"] = prompt_count
    metadata["totalTokenCount"] = (
        prompt_count + metadata["candidatesTokenCount"] + metadata.get("thoughtsTokenCount", 0)
    )
    if usage.cache_read_tokens:
        metadata["cachedContentTokenCount"] = usage.cache_read_tokens
    return RequestResult(ok=True, body=response)


def _response(model: str, output: ModelOutput, *, seed: str, limit: int | None, thoughts: bool) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    thought_tokens = 0
    if thoughts:
        planned = ", ".join(call.tool_name for call in output.calls) or "an answer"
        thought = f"The user's message calls for {planned}."
        parts.append({"text": thought, "thought": True})
        thought_tokens = count_tokens(thought)
    if output.text:
        parts.append({"text": output.text})
    calls: list[dict[str, Any]] = [
        {"functionCall": {"name": call.tool_name, "args": call.arguments}} for call in output.calls
    ]
    if calls and signs_calls(model):
        # Gemini 3 signs an answer's first call; it wants the signature back with the call.
        calls[0]["thoughtSignature"] = base64.b64encode(hashlib.sha256(seed.encode()).digest()).decode()
    parts.extend(calls)
    answer = [part for part in parts if not part.get("thought")]
    tokens = count_tokens(json.dumps(answer)) if answer else 1
    finish = "STOP"
    if limit is not None and tokens > limit:
        # Cut off: a function call cannot be half written, so only the text's start is left.
        text = (output.text or "")[: limit * 4]
        parts = [part for part in parts if part.get("thought")] + ([{"text": text}] if text else [])
        tokens, finish = limit, "MAX_TOKENS"
    usage: dict[str, Any] = {"promptTokenCount": 0, "candidatesTokenCount": tokens, "totalTokenCount": 0}
    if thought_tokens:
        usage["thoughtsTokenCount"] = thought_tokens
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": seed[:22],
    }


def stream_chunks(response: Mapping[str, Any]) -> Iterator[bytes]:
    """A whole response as ``streamGenerateContent?alt=sse`` sends it: text in pieces, each
    function call whole, the finish reason and usage in the last chunk."""
    candidate = response["candidates"][0]
    base = {"modelVersion": response["modelVersion"], "responseId": response["responseId"]}
    parts: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        if "text" in part:
            parts.extend({**part, "text": piece} for piece in pieces(part["text"]))
        else:
            parts.append(part)
    for index, part in enumerate(parts or [{"text": ""}]):
        chunk: dict[str, Any] = {**base, "candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}]}
        if index == max(len(parts), 1) - 1:
            chunk["candidates"][0]["finishReason"] = candidate["finishReason"]
            chunk["usageMetadata"] = response["usageMetadata"]
        yield b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


def timestamp(seconds: float) -> str:
    """An RFC 3339 time as Google writes it."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def state_name(job: BatchJob) -> str:
    """The batch's ``BATCH_STATE_*`` (a cancel under way shows as still running)."""
    if job.phase is Phase.ENDED:
        return {
            EndKind.COMPLETED: "BATCH_STATE_SUCCEEDED",
            EndKind.CANCELED: "BATCH_STATE_CANCELLED",
            EndKind.EXPIRED: "BATCH_STATE_EXPIRED",
            EndKind.FAILED: "BATCH_STATE_FAILED",
        }[job.end_kind or EndKind.COMPLETED]
    return "BATCH_STATE_PENDING" if job.polls == 0 and job.phase is Phase.RUNNING else "BATCH_STATE_RUNNING"


def batch_json(job: BatchJob, now: float, output: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The batch as its long-running operation; ``output`` is an ended batch's (see ``batch_output``)."""
    done = job.done_count(now)
    succeeded = job.succeeded_count(done)
    metadata: dict[str, Any] = {
        "@type": BATCH_TYPE,
        "name": job.id,
        "model": job.extra["model"],
        "displayName": job.extra["display_name"],
        "inputConfig": job.extra["input_config"],
        "createTime": timestamp(job.created_at),
        "updateTime": timestamp(job.ended_at or now),
        "state": state_name(job),
        "batchStats": {
            "requestCount": str(job.total),
            "successfulRequestCount": str(succeeded),
            "failedRequestCount": str(done - succeeded),
            "pendingRequestCount": str(job.total - done),
        },
    }
    operation: dict[str, Any] = {"name": job.id, "metadata": metadata, "done": job.phase is Phase.ENDED}
    if job.phase is Phase.ENDED:
        metadata["endTime"] = timestamp(job.ended_at or now)
        if output is not None:
            metadata["output"] = dict(output)
            operation["response"] = {"@type": OUTPUT_TYPE, **output}
    return operation


def batch_entries(job: BatchJob, *, unrun_entries: bool) -> Iterator[tuple[str, dict[str, Any]]]:
    """An ended batch's results in request order, as ``(key, {"response"} | {"error"})``; a
    request it never ran is an error entry when ``unrun_entries``, else left out."""
    unrun = _UNRUN.get(job.end_kind or EndKind.COMPLETED)
    for index, key in enumerate(job.custom_ids):
        if index >= job.processed:
            if unrun is not None and unrun_entries:
                yield key, {"error": rpc_status(*unrun)}
            continue
        result = job.results[index]
        if result.ok:
            yield key, {"response": result.body}
        else:
            error = result.body["error"]
            yield key, {"error": {"code": rpc_code(error["status"]), "message": error["message"]}}


def batch_output(state: EmulatorState, job: BatchJob) -> dict[str, Any]:
    """An ended batch's output, made once: inline responses for inline input, else a result file."""
    known = job.extra.get("output")
    if known is not None:
        return dict(known)
    entries = batch_entries(job, unrun_entries=state.config.gemini_unrun_entries)
    if job.extra["inline"]:
        metadata = job.extra["metadata"]
        responses = [{**entry, "metadata": metadata[key]} for key, entry in entries]
        output: dict[str, Any] = {"inlinedResponses": {"inlinedResponses": responses}}
    else:
        name = f"files/{job.id.removeprefix('batches/')}-results"
        lines = [json.dumps({"key": key, **entry}).encode() + b"\n" for key, entry in entries]
        state.gemini_files[name] = StoredFile(
            id=name,
            filename="results.jsonl",
            purpose="batch_output",
            created_at=int(job.ended_at or 0),
            chunks=lines,
            mime_type="application/jsonl",
        )
        output = {"responsesFile": name}
    job.extra["output"] = output
    return output


def file_json(stored: StoredFile) -> dict[str, Any]:
    """A file as the Files API shows it."""
    created = timestamp(stored.created_at)
    body: dict[str, Any] = {
        "name": stored.id,
        "displayName": stored.filename,
        "mimeType": stored.mime_type,
        "sizeBytes": str(stored.size),
        "createTime": created,
        "updateTime": created,
        "sha256Hash": hashlib.sha256(b"".join(stored.chunks)).hexdigest(),
        "uri": f"https://generativelanguage.googleapis.com/v1beta/{stored.id}",
        "state": "ACTIVE",
        "source": "GENERATED" if stored.purpose == "batch_output" else "UPLOADED",
    }
    if stored.purpose == "batch_output":
        body["downloadUri"] = f"https://generativelanguage.googleapis.com/v1beta/{stored.id}:download?alt=media"
    return body
