"""The Gemini API (``google-genai``'s paths, API version ``v1beta``): models, batches and files.

* ``POST /v1beta/models/{model}:generateContent`` / ``:streamGenerateContent?alt=sse`` / ``:batchGenerateContent``
* ``/v1beta/batches`` (list), ``/v1beta/batches/{id}`` (get, delete), ``:cancel``
* ``POST /upload/v1beta/files`` (a resumable upload: the start answers with the upload URL, the
  chunks go there, the last one finalizes), ``/v1beta/files/{id}`` (get, delete), ``:download``

A method comes after a colon in the last path segment (``gemini-2.5-flash:generateContent``),
so each path takes the segment whole and splits it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from nightshift.emulator import gemini_api as api
from nightshift.emulator.batches import BatchJob, Phase
from nightshift.emulator.bodies import read_json, stream
from nightshift.emulator.errors import ApiError, invalid, not_found
from nightshift.emulator.gemini_checks import check_batch_line
from nightshift.emulator.routes.deps import State
from nightshift.emulator.state import EmulatorState, StoredFile

router = APIRouter()
MAX_FILE_BYTES = 2 * 1024**3


def _split(segment: str) -> tuple[str, str]:
    name, _, method = segment.partition(":")
    return name, method


@router.post("/v1beta/models/{segment}")
async def model_method(request: Request, state: State, segment: str) -> Response:
    """``generateContent``, ``streamGenerateContent`` or ``batchGenerateContent`` of a model."""
    model, method = _split(segment)
    body = await read_json(request, state)
    if method == "batchGenerateContent":
        return await _create_batch(state, model, body)
    if method not in ("generateContent", "streamGenerateContent"):
        raise not_found(f"Method {method!r} of models/{model} is not found.")
    result = api.run(state, body, model=model)
    if result.ok and method == "streamGenerateContent":
        return StreamingResponse(api.stream_chunks(result.body), media_type="text/event-stream")
    return JSONResponse(result.body, status_code=result.status)


async def _create_batch(state: EmulatorState, model: str, body: Any) -> JSONResponse:
    batch = body.get("batch") if isinstance(body, dict) else None
    if not isinstance(batch, dict):
        raise invalid("* BatchGenerateContentRequest.batch: batch is required")
    source = batch.get("inputConfig") or {}
    now = state.now()
    batch_id = state.next_id("batches/")
    metadata: dict[str, Any] = {}
    if "requests" in source:
        size = len(json.dumps(source["requests"]))
        if size > state.config.gemini_inline_bytes:
            raise invalid(f"Request payload size exceeds the limit: {state.config.gemini_inline_bytes} bytes.")
        lines = [(str(i), item) for i, item in enumerate((source["requests"] or {}).get("requests") or [])]
        requests = []
        for index, item in lines:
            key = str(((item.get("metadata") or {}) if isinstance(item, dict) else {}).get("key") or index)
            metadata[key] = item.get("metadata") or {}
            requests.append((key, item.get("request") if isinstance(item, dict) else None))
    elif "fileName" in source:
        requests = _file_requests(state, str(source["fileName"]))
    else:
        raise invalid("* BatchGenerateContentRequest.batch.input_config: input_config is required")
    if not requests:
        raise invalid("* BatchGenerateContentRequest.batch.input_config: the batch has no requests")
    results = []
    for key, request in requests:
        _check_model(request, model)
        results.append((key, api.run(state, request, model=model, custom_id=key, batch_id=batch_id)))
    job = state.new_batch(
        batch_id,
        now,
        results,
        extra={
            "model": f"models/{model}",
            "display_name": batch.get("displayName") or "",
            "input_config": {"fileName": source["fileName"]} if "fileName" in source else {"requests": {}},
            "inline": "requests" in source,
            "metadata": metadata,
        },
    )
    state.gemini_batches[batch_id] = job
    await asyncio.sleep(state.config.create_answer_delay)
    return JSONResponse(api.batch_json(job, now))


def _check_model(request: Any, model: str) -> None:
    named = request.get("model") if isinstance(request, dict) else None
    if named is not None and str(named).removeprefix("models/") != model:
        raise invalid(f"A batch of {model} cannot hold a request for {named}: a batch takes one model.")


def _file_requests(state: EmulatorState, name: str) -> list[tuple[str, Any]]:
    stored = state.gemini_files.get(name)
    if stored is None:
        raise not_found(f"File {name} does not exist.")
    seen: set[str] = set()
    requests = []
    for number, raw in enumerate(b"".join(stored.chunks).splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            raise invalid(f"Line {number} of {name} is not valid JSON.") from None
        requests.append(check_batch_line(line, seen))
    return requests


def find_batch(state: EmulatorState, name: str, *, poll: bool) -> BatchJob:
    """The batch, brought up to date (``poll``: count a get), or a 404."""
    job = state.gemini_batches.get(name)
    if job is None:
        raise not_found(f"Batch {name} not found.")
    job.refresh(state.now(), poll=poll)
    return job


def _json(state: EmulatorState, job: BatchJob) -> dict[str, Any]:
    output = api.batch_output(state, job) if job.phase is Phase.ENDED else None
    return api.batch_json(job, state.now(), output)


@router.get("/v1beta/batches")
async def list_batches(
    state: State,
    page_size: Annotated[int, Query(alias="pageSize")] = 50,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
) -> JSONResponse:
    """A page of batches, newest first (listing does not count as a poll)."""
    if not 1 <= page_size <= 1000:
        raise invalid("page_size must be between 1 and 1000.")
    ordered = list(reversed(state.gemini_batches))
    start = int(page_token or 0)
    page = [find_batch(state, name, poll=False) for name in ordered[start : start + page_size]]
    body: dict[str, Any] = {"operations": [_json(state, job) for job in page]}
    if start + page_size < len(ordered):
        body["nextPageToken"] = str(start + page_size)
    return JSONResponse(body)


@router.get("/v1beta/batches/{segment}")
async def get_batch(state: State, segment: str) -> JSONResponse:
    """The batch, after counting this get as a poll."""
    return JSONResponse(_json(state, find_batch(state, f"batches/{segment}", poll=True)))


@router.post("/v1beta/batches/{segment}")
async def cancel_batch(request: Request, state: State, segment: str) -> JSONResponse:
    """``:cancel``: start cancelling (logged, so a test can see that the cancel reached the provider)."""
    name, method = _split(segment)
    if method != "cancel":
        raise not_found(f"Method {method!r} of batches/{name} is not found.")
    state.log_request(request.method, request.url.path, None, request.headers)
    job = find_batch(state, f"batches/{name}", poll=False)
    if job.phase is Phase.ENDED:
        raise ApiError(400, "invalid_request_error", f"Batch batches/{name} has ended: it cannot be cancelled.")
    job.cancel(state.now())
    return JSONResponse({})


@router.delete("/v1beta/batches/{segment}")
async def delete_batch(state: State, segment: str) -> JSONResponse:
    """Forget the batch."""
    find_batch(state, f"batches/{segment}", poll=False)
    del state.gemini_batches[f"batches/{segment}"]
    return JSONResponse({})


@router.post("/upload/v1beta/files")
async def upload(request: Request, state: State, upload_id: str | None = None) -> Response:
    """A resumable upload: ``start`` (the file's metadata, answered with the upload URL), then
    ``upload`` chunks at their offsets, the last with ``finalize`` (answered with the file)."""
    command = request.headers.get("x-goog-upload-command", "")
    if upload_id is None:
        if command != "start" or request.headers.get("x-goog-upload-protocol") != "resumable":
            raise invalid("Uploads are resumable: X-Goog-Upload-Protocol: resumable and Command: start.")
        body = await read_json(request, state)
        described = (body or {}).get("file") or {}
        name = state.next_id("files/")
        state.gemini_uploads[name.removeprefix("files/")] = StoredFile(
            id=name,
            filename=str(described.get("displayName") or name),
            purpose="upload",
            created_at=int(state.now()),
            mime_type=str(described.get("mimeType") or request.headers.get("x-goog-upload-header-content-type", "")),
        )
        url = f"{request.base_url}upload/v1beta/files?upload_id={name.removeprefix('files/')}"
        return JSONResponse({}, headers={"x-goog-upload-url": url, "x-goog-upload-status": "active"})
    stored = state.gemini_uploads.get(upload_id)
    if stored is None:
        raise not_found(f"No upload {upload_id} under way.")
    offset = int(request.headers.get("x-goog-upload-offset", "0"))
    if offset != stored.size:
        raise invalid(f"The chunk's offset {offset} is not the upload's size so far, {stored.size}.")
    stored.chunks.append(await request.body())
    if stored.size > MAX_FILE_BYTES:
        raise invalid("A file is limited to 2 GB.")
    if "finalize" not in command:
        return Response(headers={"x-goog-upload-status": "active"})
    del state.gemini_uploads[upload_id]
    state.gemini_files[stored.id] = stored
    described = api.file_json(stored)
    state.log_request("POST", "/upload/v1beta/files", described, request.headers)
    return JSONResponse({"file": described}, headers={"x-goog-upload-status": "final"})


@router.get("/v1beta/files/{segment}")
async def get_file(state: State, segment: str) -> Response:
    """The file's metadata, or with ``:download`` its bytes (the results of a batch only)."""
    name, method = _split(segment)
    stored = state.gemini_files.get(f"files/{name}")
    if stored is None:
        raise ApiError(
            403, "permission_error", f"You do not have permission to access the File {name} or it may not exist."
        )
    if method == "download":
        if stored.purpose != "batch_output":
            raise invalid("Only generated files can be downloaded.")
        return StreamingResponse(stream(stored.chunks), media_type="application/octet-stream")
    return JSONResponse(api.file_json(stored))


@router.delete("/v1beta/files/{segment}")
async def delete_file(state: State, segment: str) -> JSONResponse:
    """Forget the file."""
    if state.gemini_files.pop(f"files/{segment}", None) is None:
        raise not_found(f"File files/{segment} does not exist.")
    return JSONResponse({})
