"""The OpenAI Batch API: ``/v1/batches`` (base URL with ``/v1``) over files of ``openai_files``.

Every line of a batch is answered when it is created (a refused input file makes it ``failed`` at
its first retrieve); retrieves move it along its state machine (``batches.BatchJob``), and its
output and error files are written when it is first seen ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from nightshift.emulator import openai_api as api
from nightshift.emulator.batches import BatchJob, Phase
from nightshift.emulator.bodies import read_json
from nightshift.emulator.errors import invalid, not_found
from nightshift.emulator.openai_checks import ENDPOINT, parse_input_file
from nightshift.emulator.routes.deps import State
from nightshift.emulator.routes.openai_files import find_file
from nightshift.emulator.state import EmulatorState, StoredFile

router = APIRouter()


def find_batch(state: EmulatorState, batch_id: str, *, poll: bool) -> BatchJob:
    """The batch with this id, brought up to date (``poll``: count a retrieve), or a 404."""
    job = state.openai_batches.get(batch_id)
    if job is None:
        raise not_found(f"No batch found with id '{batch_id}'.")
    job.refresh(state.now(), poll=poll)
    if job.phase is Phase.ENDED and "files_written" not in job.extra:
        _write_files(state, job)
    return job


@router.post("/v1/batches")
async def create_batch(request: Request, state: State) -> JSONResponse:
    """Create a batch over an uploaded ``batch`` file, answering each of its lines now."""
    body = await read_json(request, state)
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object")
    endpoint, window, metadata = body.get("endpoint"), body.get("completion_window"), body.get("metadata")
    stored = find_file(state, str(body.get("input_file_id")))
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
    now = state.now()
    batch_id = state.next_id("batch_")
    requests, errors = parse_input_file(b"".join(stored.chunks), endpoint)
    if errors:
        requests = []
    results = [
        (custom_id, api.run(state, line, custom_id=custom_id, batch_id=batch_id)) for custom_id, line in requests
    ]
    model = next((line.get("model") for _, line in requests if isinstance(line.get("model"), str)), None)
    job = state.new_batch(
        batch_id,
        now,
        results,
        failure=errors or None,
        extra={"endpoint": endpoint, "input_file_id": stored.id, "metadata": metadata, "model": model},
    )
    state.openai_batches[batch_id] = job
    await asyncio.sleep(state.config.create_answer_delay)
    return JSONResponse(api.batch_json(job, now))


@router.get("/v1/batches")
async def list_batches(state: State, limit: int = 20, after: str | None = None) -> JSONResponse:
    """A page of batches, newest first (listing does not count as a poll)."""
    if not 1 <= limit <= 100:
        raise invalid("Invalid 'limit': must be between 1 and 100.", param="limit")
    ordered = list(reversed(state.openai_batches.values()))
    start = 0
    if after is not None:
        ids = [job.id for job in ordered]
        if after not in ids:
            raise invalid(f"Invalid 'after': no batch with id {after!r}.", param="after")
        start = ids.index(after) + 1
    page = [find_batch(state, job.id, poll=False) for job in ordered[start : start + limit]]
    now = state.now()
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
async def retrieve_batch(state: State, batch_id: str) -> JSONResponse:
    """The batch, after counting this retrieve as a poll."""
    return JSONResponse(api.batch_json(find_batch(state, batch_id, poll=True), state.now()))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(request: Request, state: State, batch_id: str) -> JSONResponse:
    """Start cancelling the batch (logged, so a test can see that the cancel reached the provider)."""
    state.log_request(request.method, request.url.path, None, request.headers)
    job = find_batch(state, batch_id, poll=False)
    if job.phase is Phase.ENDED:
        raise invalid(f"Cannot cancel a batch with status '{api.status(job)}'.")
    now = state.now()
    job.cancel(now)
    return JSONResponse(api.batch_json(job, now))


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
                created_at=int(state.now()),
                chunks=lines,
            )
            state.files[stored.id] = stored
            job.extra[key] = stored.id
