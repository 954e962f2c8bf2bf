"""Letta's runs: ``GET /v1/runs`` and a run's messages, steps and usage; batch runs are runs too."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query, Response
from fastapi.responses import StreamingResponse
from pydantic import Field

from nightshift.api.batch_views import json_response
from nightshift.api.deps import Org, ReadConn, State
from nightshift.api.input import Body
from nightshift.api.letta_messages import DEFAULT_VIEW, to_letta_messages
from nightshift.api.letta_stream import STREAMED
from nightshift.api.routers import secured
from nightshift.api.routers.agent_messages import view_of
from nightshift.api.routers.params import PageQuery, page_of
from nightshift.api.run_schemas import (
    RunPublic,
    RunUsage,
    StepPublic,
    batch_run_json,
    run_json,
    step_json,
    usage_json,
)
from nightshift.api.run_stream import check_background, stored_stream
from nightshift.domain.agent_runs import AgentRun
from nightshift.domain.pagination import MAX_PAGE, Page
from nightshift.services import run_listing
from nightshift.services.run_streams import check_reading
from nightshift.store.run_listing import Listed, RunFilter

router = secured("runs")

RunStatusName = Literal["created", "running", "completed", "failed", "cancelled"]
OPEN_STATUSES: list[RunStatusName] = ["created", "running"]


def _json(run: Listed) -> dict[str, Any]:
    return run_json(run) if isinstance(run, AgentRun) else batch_run_json(run.run, run.agent_id)


@router.get("/v1/runs", response_model=list[RunPublic])
@router.get("/v1/runs/", include_in_schema=False, response_model=list[RunPublic])
async def list_runs(
    conn: ReadConn,
    org: Org,
    agent_id: str | None = None,
    agent_ids: Annotated[list[str] | None, Query(max_length=MAX_PAGE)] = None,
    statuses: Annotated[list[RunStatusName] | None, Query()] = None,
    background: bool | None = None,
    active: bool = False,
    stop_reason: str | None = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE)] = 100,
    order: Literal["asc", "desc"] | None = None,
    ascending: bool | None = None,
) -> Response:
    """The organization's runs, newest first: one per message send, and the batch runs.

    Filters: ``agent_id`` (or the older ``agent_ids``), ``statuses``, ``active`` (created or
    running), ``background`` and ``stop_reason`` (a batch run counts as background and has none).
    """
    wanted = [*(agent_ids or ()), *([agent_id] if agent_id else [])]
    chosen = list(statuses or ())
    if active:
        chosen = [s for s in chosen if s in OPEN_STATUSES] if chosen else list(OPEN_STATUSES)
        if not chosen:
            return json_response([])
    if order is None:
        order = "asc" if ascending else "desc"
    where = RunFilter(agent_ids=wanted, statuses=chosen, background=background, stop_reason=stop_reason)
    page = Page(after=after, before=before, limit=limit, order=order)
    return json_response([_json(run) for run in await run_listing.list_any_runs(conn, org, where, page)])


@router.get("/v1/runs/{run_id}", response_model=RunPublic)
async def retrieve_run(run_id: str, conn: ReadConn, org: Org) -> Response:
    """One run: a send to one agent (``run-...``) or a batch run (``batch-...``)."""
    return json_response(_json(await run_listing.get_any_run(conn, org, run_id)))


@router.get("/v1/runs/{run_id}/messages")
async def list_run_messages(run_id: str, conn: ReadConn, org: Org, page: PageQuery) -> list[dict[str, Any]]:
    """The messages the run wrote, inputs and heartbeats too, shown as its send asked."""
    run, messages = await run_listing.messages_of_any_run(conn, org, run_id, page)
    view = view_of(run.request_config) if isinstance(run, AgentRun) else DEFAULT_VIEW
    return [part for message in messages for part in to_letta_messages(message, view)]


@router.get("/v1/runs/{run_id}/steps", response_model=list[StepPublic])
async def list_run_steps(run_id: str, conn: ReadConn, org: Org, page: PageQuery) -> Response:
    """The model calls of an agent run, each with its tokens (a batch run's steps are its provider
    batches: see ``GET /v1/messages/batches/{id}``; here its list is empty)."""
    run = await run_listing.get_any_run(conn, org, run_id)
    if not isinstance(run, AgentRun):
        return json_response([])
    return json_response([step_json(run, step) for step in page_of(run.steps, page, lambda s: s.id)])


@router.get("/v1/runs/{run_id}/usage", response_model=RunUsage)
async def run_usage(run_id: str, conn: ReadConn, org: Org) -> Response:
    """The tokens the run used, over all its steps (and agents, for a batch run)."""
    usage = await run_listing.usage_of_any_run(conn, org, run_id)
    return json_response(usage_json(usage.prompt, usage.completion, usage.cache_read, usage.cache_write))


class RetrieveStream(Body):
    """Letta's RetrieveStreamRequest: where to start reading a run's stream, and how."""

    starting_after: int = Field(default=0, description="the seq_id of the last chunk received (0: from the start)")
    include_pings: bool | None = True
    poll_interval: float | None = None
    batch_size: int | None = None


@router.post("/v1/runs/{run_id}/stream", response_class=StreamingResponse, responses=STREAMED)
async def stream_run(
    run_id: str, state: State, org: Org, conn: ReadConn, body: RetrieveStream | None = None
) -> StreamingResponse:
    """A background run's stream: its chunks after ``starting_after`` (their ``seq_id``), stored
    or to come, until its stop reason, usage and ``[DONE]`` (Letta's ``runs.messages.stream``).

    Resume a dropped stream with the ``seq_id`` of the last chunk received: nothing is lost or
    repeated. A 400 for a run not sent in the background (its stream is not kept).
    """
    wanted = body or RetrieveStream()
    return await _stream(run_id, state, org, conn, wanted)


@router.get("/v1/runs/{run_id}/stream", response_class=StreamingResponse, responses=STREAMED)
async def stream_run_get(
    run_id: str,
    state: State,
    org: Org,
    conn: ReadConn,
    starting_after: int = 0,
    include_pings: bool = True,
    poll_interval: float | None = None,
    batch_size: int | None = None,
) -> StreamingResponse:
    """The same as ``POST /v1/runs/{run_id}/stream``, its options in the query (for EventSource)."""
    wanted = RetrieveStream(
        starting_after=starting_after, include_pings=include_pings, poll_interval=poll_interval, batch_size=batch_size
    )
    return await _stream(run_id, state, org, conn, wanted)


async def _stream(run_id: str, state: State, org: str, conn: ReadConn, wanted: RetrieveStream) -> StreamingResponse:
    poll, page = check_reading(
        starting_after=wanted.starting_after, poll_interval=wanted.poll_interval, batch_size=wanted.batch_size
    )
    check_background(await run_listing.get_any_run(conn, org, run_id))
    return stored_stream(
        state,
        org,
        run_id,
        after=wanted.starting_after,
        pings=wanted.include_pings is not False,
        poll_interval=poll,
        page=page,
    )
