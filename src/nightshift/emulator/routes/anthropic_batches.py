"""The Anthropic Message Batches API: ``/v1/messages/batches`` (base URL without ``/v1``).

Every answer of a batch is computed when it is created; retrieves move it along its state machine
(``batches.BatchJob``). The results file is served at a relative ``results_url``.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from nightshift.emulator import anthropic_api as api
from nightshift.emulator.anthropic_checks import check_batch
from nightshift.emulator.batches import BatchJob, Phase
from nightshift.emulator.bodies import read_json, stream
from nightshift.emulator.errors import invalid, not_found
from nightshift.emulator.routes.deps import State
from nightshift.emulator.state import EmulatorState

router = APIRouter()


def find_batch(state: EmulatorState, batch_id: str, *, poll: bool) -> BatchJob:
    """The batch with this id, brought up to date (``poll``: count a retrieve), or a 404."""
    job = state.anthropic_batches.get(batch_id)
    if job is None:
        raise not_found(f"No message batch found with id {batch_id!r}")
    job.refresh(state.now(), poll=poll)
    return job


@router.post("/v1/messages/batches")
async def create_batch(request: Request, state: State) -> JSONResponse:
    """Create a batch, answering each of its requests now (a bad request is an ``errored`` result)."""
    body = await read_json(request, state)
    requests = check_batch(body)
    version = request.headers.get("anthropic-version")
    now = state.now()
    batch_id = state.next_id("msgbatch_")
    results = [
        (custom_id, api.run(state, params, version=version, custom_id=custom_id, batch_id=batch_id))
        for custom_id, params in requests
    ]
    job = state.new_batch(batch_id, now, results)
    state.anthropic_batches[batch_id] = job
    await asyncio.sleep(state.config.create_answer_delay)
    return JSONResponse(api.batch_json(job))


@router.get("/v1/messages/batches")
async def list_batches(
    state: State, limit: int = 20, after_id: str | None = None, before_id: str | None = None
) -> JSONResponse:
    """A page of batches, newest first (listing does not count as a poll)."""
    if not 1 <= limit <= 1000:
        raise invalid("limit: Input should be between 1 and 1000")
    now = state.now()
    ordered = list(reversed(state.anthropic_batches.values()))  # newest first
    ids = [job.id for job in ordered]
    if after_id is not None:
        if after_id not in ids:
            raise invalid(f"after_id: no message batch with id {after_id!r}")
        start = ids.index(after_id) + 1
        page, has_more = ordered[start : start + limit], start + limit < len(ordered)
    elif before_id is not None:
        if before_id not in ids:
            raise invalid(f"before_id: no message batch with id {before_id!r}")
        end = ids.index(before_id)
        page, has_more = ordered[max(0, end - limit) : end], end - limit > 0
    else:
        page, has_more = ordered[:limit], limit < len(ordered)
    for job in page:
        job.refresh(now, poll=False)
    return JSONResponse(
        {
            "data": [api.batch_json(job) for job in page],
            "has_more": has_more,
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
        }
    )


@router.get("/v1/messages/batches/{batch_id}")
async def retrieve_batch(state: State, batch_id: str) -> JSONResponse:
    """The batch, after counting this retrieve as a poll."""
    return JSONResponse(api.batch_json(find_batch(state, batch_id, poll=True)))


@router.post("/v1/messages/batches/{batch_id}/cancel")
async def cancel_batch(request: Request, state: State, batch_id: str) -> JSONResponse:
    """Start cancelling the batch (logged, so a test can see that the cancel reached the provider)."""
    state.log_request(request.method, request.url.path, None, request.headers)
    job = find_batch(state, batch_id, poll=False)
    job.cancel(state.now())
    return JSONResponse(api.batch_json(job))


@router.delete("/v1/messages/batches/{batch_id}")
async def delete_batch(state: State, batch_id: str) -> JSONResponse:
    """Forget an ended batch; one still running is refused."""
    job = find_batch(state, batch_id, poll=False)
    if job.phase is not Phase.ENDED:
        raise invalid(
            f"Message batch {batch_id} cannot be deleted while it is {api.batch_json(job)['processing_status']}"
            "; cancel it and wait for it to end first"
        )
    del state.anthropic_batches[batch_id]
    return JSONResponse({"id": batch_id, "type": "message_batch_deleted"})


@router.get("/v1/messages/batches/{batch_id}/results")
async def batch_results(state: State, batch_id: str) -> Response:
    """The results JSONL of an ended batch, streamed."""
    job = find_batch(state, batch_id, poll=False)
    if job.phase is not Phase.ENDED:
        raise invalid(f"Message batch {batch_id} has not ended yet; its results are not available")
    return StreamingResponse(stream(api.result_lines(job)), media_type="application/binary")
