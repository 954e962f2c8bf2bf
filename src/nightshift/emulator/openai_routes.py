"""HTTP routes of the OpenAI Chat Completions, Files and Batch APIs (base URL with ``/v1``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from nightshift.emulator import openai_api as api
from nightshift.emulator.batches import BatchJob, Phase
from nightshift.emulator.bodies import read_json, stream
from nightshift.emulator.errors import ApiError, invalid, not_found
from nightshift.emulator.multipart import parse_form
from nightshift.emulator.openai_checks import ENDPOINT, parse_input_file
from nightshift.emulator.state import EmulatorState, StoredFile

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
MAX_FILE_BYTES = 512 * 1024 * 1024  # any upload; a batch input file is limited to 200 MB when validated


def build_router(state: EmulatorState) -> APIRouter:
    """The OpenAI routes over one emulator state."""
    router = APIRouter()

    def find_file(file_id: str) -> StoredFile:
        stored = state.files.get(file_id)
        if stored is None:
            raise not_found(f"No such File object: {file_id}")
        return stored

    def find_batch(batch_id: str, *, poll: bool) -> BatchJob:
        job = state.openai_batches.get(batch_id)
        if job is None:
            raise not_found(f"No batch found with id '{batch_id}'.")
        job.refresh(time.time(), poll=poll)
        if job.phase is Phase.ENDED and "files_written" not in job.extra:
            _write_files(state, job)
        return job

    @router.post("/v1/chat/completions")
    async def chat_completion(request: Request) -> JSONResponse:
        body = await read_json(request, state)
        result = api.run(state, body)
        return JSONResponse(result.body, status_code=result.status)

    @router.post("/v1/files")
    async def create_file(request: Request) -> JSONResponse:
        form = parse_form(await request.body(), request.headers.get("content-type", ""))
        purpose = form.get("purpose")
        upload = form.get("file")
        if purpose is None:
            raise invalid("Missing required parameter: 'purpose'.", param="purpose")
        if upload is None:
            raise invalid("Missing required parameter: 'file'.", param="file")
        purpose_text = purpose.data.decode()
        if purpose_text not in PURPOSES:
            raise invalid(f"Invalid value for 'purpose': {purpose_text!r}.", param="purpose")
        filename = upload.filename or "upload"
        if purpose_text == "batch" and not filename.endswith(".jsonl"):
            raise invalid("Invalid file format for Batch API. Must be .jsonl", param="file")
        if len(upload.data) > MAX_FILE_BYTES:
            raise ApiError(413, "request_too_large", "File is too large: files are limited to 512 MB.")
        stored = StoredFile(
            id=state.next_id("file-"),
            filename=filename,
            purpose=purpose_text,
            created_at=int(time.time()),
            chunks=[upload.data],
        )
        state.files[stored.id] = stored
        state.log_request("POST", "/v1/files", stored.public(), request.headers)
        return JSONResponse(stored.public())

    @router.get("/v1/files")
    async def list_files() -> JSONResponse:
        data = [f.public() for f in reversed(state.files.values())]
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        return JSONResponse({"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": False})

    @router.get("/v1/files/{file_id}")
    async def retrieve_file(file_id: str) -> JSONResponse:
        return JSONResponse(find_file(file_id).public())

    @router.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str) -> Response:
        stored = find_file(file_id)
        return StreamingResponse(stream(stored.chunks), media_type="application/octet-stream")

    @router.delete("/v1/files/{file_id}")
    async def delete_file(file_id: str) -> JSONResponse:
        find_file(file_id)
        del state.files[file_id]
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})

    @router.post("/v1/batches")
    async def create_batch(request: Request) -> JSONResponse:
        body = await read_json(request, state)
        if not isinstance(body, dict):
            raise invalid("The request body must be a JSON object")
        endpoint, window, metadata = body.get("endpoint"), body.get("completion_window"), body.get("metadata")
        stored = find_file(str(body.get("input_file_id")))
        if stored.purpose != "batch":
            raise invalid(f"File {stored.id} was not uploaded with purpose 'batch'.", param="input_file_id")
        if endpoint != ENDPOINT:
            raise invalid(
                f"Invalid value for 'endpoint': {endpoint!r}; the emulator serves {ENDPOINT} only.",
                param="endpoint",
            )
        if window != "24h":
            raise invalid("Invalid value for 'completion_window': only '24h' is supported.", param="completion_window")
        _check_metadata(metadata)
        now = time.time()
        batch_id = state.next_id("batch_")
        requests, errors = parse_input_file(b"".join(stored.chunks), endpoint)
        if errors:
            requests = []
        results = [api.run(state, line, custom_id=custom_id, batch_id=batch_id) for custom_id, line in requests]
        model = next((line.get("model") for _, line in requests if isinstance(line.get("model"), str)), None)
        job = BatchJob(
            id=batch_id,
            created_at=now,
            timing=state.timing(now),
            custom_ids=[custom_id for custom_id, _ in requests],
            results=results,
            failure=errors or None,
            extra={"endpoint": endpoint, "input_file_id": stored.id, "metadata": metadata, "model": model},
        )
        state.openai_batches[batch_id] = job
        await asyncio.sleep(state.config.create_answer_delay)
        return JSONResponse(api.batch_json(job, now))

    @router.get("/v1/batches")
    async def list_batches(limit: int = 20, after: str | None = None) -> JSONResponse:
        if not 1 <= limit <= 100:
            raise invalid("Invalid 'limit': must be between 1 and 100.", param="limit")
        ordered = list(reversed(state.openai_batches.values()))
        start = 0
        if after is not None:
            ids = [job.id for job in ordered]
            if after not in ids:
                raise invalid(f"Invalid 'after': no batch with id {after!r}.", param="after")
            start = ids.index(after) + 1
        page = [find_batch(job.id, poll=False) for job in ordered[start : start + limit]]
        now = time.time()
        return JSONResponse(
            {
                "object": "list",
                "data": [api.batch_json(job, now) for job in page],
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
                "has_more": start + limit < len(ordered),
            }
        )

    @router.get("/v1/batches/{batch_id}")
    async def retrieve_batch(batch_id: str) -> JSONResponse:
        return JSONResponse(api.batch_json(find_batch(batch_id, poll=True), time.time()))

    @router.post("/v1/batches/{batch_id}/cancel")
    async def cancel_batch(request: Request, batch_id: str) -> JSONResponse:
        state.log_request(request.method, request.url.path, None, request.headers)
        job = find_batch(batch_id, poll=False)
        if job.phase is Phase.ENDED:
            raise invalid(f"Cannot cancel a batch with status '{api.status(job)}'.")
        now = time.time()
        job.cancel(now)
        return JSONResponse(api.batch_json(job, now))

    return router


def _check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict) or len(metadata) > 16:
        raise invalid("Invalid 'metadata': at most 16 key-value pairs.", param="metadata")
    for key, value in metadata.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise invalid("Invalid 'metadata': keys up to 64 characters, string values up to 512.", param="metadata")


def _write_files(state: EmulatorState, job: BatchJob) -> None:
    """Store an ended batch's output and error files (each only when it has lines)."""
    job.extra["files_written"] = True
    output, errors = api.output_lines(job, unrun_lines=state.config.openai_unrun_lines)
    for key, lines in (("output_file_id", output), ("error_file_id", errors)):
        if lines:
            stored = StoredFile(
                id=state.next_id("file-"),
                filename=f"{job.id}_{key.removesuffix('_file_id')}.jsonl",
                purpose="batch_output",
                created_at=int(time.time()),
                chunks=lines,
            )
            state.files[stored.id] = stored
            job.extra[key] = stored.id
