"""/v1/messages/batches: step many agents through the providers' batch APIs."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Annotated, Literal

from fastapi import Header, Query, Response

from nightshift.api.approval_schemas import client_tools_of
from nightshift.api.batch_schemas import BatchCreate
from nightshift.api.batch_views import (
    BatchRunAgents,
    BatchRunCosts,
    BatchRunMessages,
    BatchRunPublic,
    BatchTurnarounds,
    agent_in_run_json,
    batch_run_json,
    json_response,
    kind_costs_json,
    run_message_json,
    turnarounds_json,
)
from nightshift.api.deps import Now, Org, ReadConn, State
from nightshift.api.errors import PROVIDER_ERROR_RESPONSES
from nightshift.api.routers import secured
from nightshift.api.routers.params import PageQuery
from nightshift.domain.batches import BatchRunKind, BatchRunRequest, BatchRunStatus
from nightshift.domain.pagination import Page
from nightshift.services import batch_runs

router = secured("batches", responses=PROVIDER_ERROR_RESPONSES)

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="Makes creating a run safe to retry: the same key and body give the same run back",
    ),
]


@router.post("/v1/messages/batches", response_model=BatchRunPublic)
async def create_batch(
    body: BatchCreate, state: State, org: Org, now: Now, idempotency_key: IdempotencyKey = None
) -> Response:
    """Start a batch run: each agent gets its messages and is stepped until it stops.

    The run is answered at once, status created: a poller writes its first step and submits it.
    One provider batch is submitted per provider per step (custom_id = agent id). After each
    step, agents that asked for another turn (request_heartbeat, or tool rules) get a heartbeat
    and go into the next step, up to ``max_steps`` (default ``NIGHTSHIFT_DEFAULT_MAX_STEPS``).
    A request for an agent already in an open step of another run is refused with 409. Bad
    input is a 4xx and nothing is written. Per-request provider errors stop that agent only;
    rate_limit_error and overloaded_error are retried in the next step, twice at most.

    With an ``Idempotency-Key`` header, a retry (after a lost response, say) gets the run the
    first request created; the same key with another body is a 422. A ``callback_url`` on a
    loopback or private address is refused unless ``NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE`` is set.
    """
    # A body of thousands of agents takes a while to check and turn into the run's requests: on a
    # thread, the event loop answers others meanwhile.
    new = await asyncio.to_thread(_new_run, body, idempotency_key)
    new = replace(new, sandbox=state.sandbox)
    view = await batch_runs.start_batch_run(
        state.engine,
        org,
        new,
        now=now,
        default_max_steps=state.settings.default_max_steps,
        callbacks=state.callbacks,
        queued=state.runs_queued,
    )
    return json_response(batch_run_json(view))


def _new_run(body: BatchCreate, idempotency_key: str | None) -> batch_runs.NewBatchRun:
    answers = {r.agent_id: answer for r in body.requests if (answer := r.answer()) is not None}
    return batch_runs.NewBatchRun(
        requests=[
            BatchRunRequest(
                agent_id=r.agent_id,
                messages=r.texts(),
                max_steps=r.max_steps,
                client_tools=client_tools_of(r.client_tools),
                answered=r.agent_id in answers,
            )
            for r in body.requests
        ],
        answers=answers,
        callback_url=str(body.callback_url) if body.callback_url else None,
        metadata=body.metadata,
        deadline=body.deadline,
        finish_within=timedelta(seconds=body.finish_within_seconds) if body.finish_within_seconds else None,
        idempotency_key=idempotency_key,
        body=body.model_dump(mode="json"),
    )


@router.get("/v1/messages/batches", response_model=list[BatchRunPublic])
async def list_batches(
    conn: ReadConn,
    org: Org,
    page: PageQuery,
    status: Annotated[list[BatchRunStatus] | None, Query(description="Only runs with these statuses")] = None,
    has_failures: Annotated[
        bool | None,
        Query(
            description="true: only runs that failed or in which some agent failed (a completed run with"
            " failed agents too); false: only the others"
        ),
    ] = None,
    kind: Annotated[
        BatchRunKind | None,
        Query(description="main: the runs POST /v1/messages/batches made; sleeptime: the sleep-time agents' runs"),
    ] = None,
) -> Response:
    """Batch runs of every status (filter with ``status``), oldest first (``order=desc`` for newest).

    ``status`` is Letta's: a run is ``completed`` when some agent finished, even if others failed
    (``progress.agents.failed`` counts them); ``has_failures=true`` finds those runs and the failed ones.
    """
    views = await batch_runs.list_batch_run_views(
        conn, org, page, statuses=status or (), has_failures=has_failures, kind=kind
    )
    return json_response([batch_run_json(view) for view in views])


@router.get("/v1/messages/batches/costs", response_model=BatchRunCosts)
async def batch_costs(conn: ReadConn, org: Org) -> Response:
    """What the organization's batch runs cost, by kind: ``main`` (the runs POST
    /v1/messages/batches made) and ``sleeptime`` (the sleep-time agents'), each with what the
    normal API would have charged for the same tokens and what the prompt cache saved."""
    return json_response(kind_costs_json(await batch_runs.costs_by_kind(conn, org)))


@router.get("/v1/messages/batches/turnaround", response_model=BatchTurnarounds)
async def batch_turnaround(conn: ReadConn, org: Org) -> Response:
    """How long the organization's latest provider batches took at their providers, from submit to
    the poll that saw the end, by provider (batches that failed or were cancelled left out): what
    the poll schedule follows to poll often where batches usually end."""
    return json_response(turnarounds_json(await batch_runs.turnarounds(conn, org)))


@router.get("/v1/messages/batches/{run_id}", response_model=BatchRunPublic)
async def get_batch(run_id: str, conn: ReadConn, org: Org) -> Response:
    return json_response(batch_run_json(await batch_runs.batch_run_view(conn, org, run_id)))


@router.get("/v1/messages/batches/{run_id}/messages", response_model=BatchRunMessages)
async def batch_messages(
    run_id: str,
    conn: ReadConn,
    org: Org,
    agent_id: Annotated[str | None, Query()] = None,
    before: Annotated[str | None, Query(description="A message id: the messages before it in the sort order")] = None,
    after: Annotated[str | None, Query(description="A message id: the messages after it in the sort order")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
) -> Response:
    """The run's messages (inputs, assistant and tool messages, heartbeats) by creation time."""
    page = Page(before=before, after=after, limit=limit, order=order)
    messages = await batch_runs.messages_of_batch_run(conn, org, run_id, page, agent_id=agent_id)
    return json_response({"messages": [run_message_json(message) for message in messages]})


@router.get("/v1/messages/batches/{run_id}/agents", response_model=BatchRunAgents)
async def batch_agents(
    run_id: str,
    conn: ReadConn,
    org: Org,
    after: Annotated[str | None, Query(description="Agents after this agent id")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Each agent of the run (by agent id): its name, state, steps answered, tokens, cost and last error.

    ``state`` is running, finished, failed, cancelled or needs_approval (stopped on a call that
    waits for the client); ``step_number`` is the step (from 0) the agent is in, or stopped or
    failed at; ``cost_without_batch_usd`` is what the same tokens cost through the normal API,
    ``batch_savings_usd`` the difference, and ``cache_savings_usd`` what
    the prompt cache saved (negative when it cost more than it saved).
    """
    agents = await batch_runs.agents_of_batch_run(conn, org, run_id, after=after, limit=limit)
    return json_response({"agents": [agent_in_run_json(agent) for agent in agents]})


@router.patch("/v1/messages/batches/{run_id}/cancel", response_model=BatchRunPublic)
async def cancel_batch(run_id: str, state: State, org: Org) -> Response:
    """Cancel a run: no further steps, and its open provider batches are cancelled at the provider.

    Steps already applied stay applied. A step still open is never applied, even if its results
    had already arrived: those agents get no messages from it. A run that has ended is unchanged.
    """
    return json_response(batch_run_json(await batch_runs.stop_batch_run(state.engine, state.worker, org, run_id)))
