"""The OpenAI Files API: ``/v1/files`` (base URL with ``/v1``).

Uploads are kept whole in memory; a batch's output and error files join them when the batch is
first seen ended (``openai_batches``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from nightshift.emulator.bodies import stream
from nightshift.emulator.errors import ApiError, invalid, not_found
from nightshift.emulator.multipart import parse_form
from nightshift.emulator.routes.deps import State
from nightshift.emulator.state import EmulatorState, StoredFile

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
MAX_FILE_BYTES = 512 * 1024 * 1024  # any upload; a batch input file is limited to 200 MB when validated

router = APIRouter()


def find_file(state: EmulatorState, file_id: str) -> StoredFile:
    """The file with this id, or a 404."""
    stored = state.files.get(file_id)
    if stored is None:
        raise not_found(f"No such File object: {file_id}")
    return stored


@router.post("/v1/files")
async def create_file(request: Request, state: State) -> JSONResponse:
    """Store a ``multipart/form-data`` upload; a ``batch`` file must be named ``*.jsonl``."""
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
        created_at=int(state.now()),
        chunks=[upload.data],
    )
    state.files[stored.id] = stored
    state.log_request("POST", "/v1/files", stored.public(), request.headers)
    return JSONResponse(stored.public())


@router.get("/v1/files")
async def list_files(state: State) -> JSONResponse:
    """Every file, newest first, in one page."""
    data = [f.public() for f in reversed(state.files.values())]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return JSONResponse({"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": False})


@router.get("/v1/files/{file_id}")
async def retrieve_file(state: State, file_id: str) -> JSONResponse:
    """The file object."""
    return JSONResponse(find_file(state, file_id).public())


@router.get("/v1/files/{file_id}/content")
async def file_content(state: State, file_id: str) -> Response:
    """The file's bytes, streamed."""
    stored = find_file(state, file_id)
    return StreamingResponse(stream(stored.chunks), media_type="application/octet-stream")


@router.delete("/v1/files/{file_id}")
async def delete_file(state: State, file_id: str) -> JSONResponse:
    """Forget the file."""
    find_file(state, file_id)
    del state.files[file_id]
    return JSONResponse({"id": file_id, "object": "file", "deleted": True})
