"""/v1/messages/batches: step many agents through the providers' batch APIs."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Header, Query
from pydantic import BaseModel, ConfigDict, Field, HttpUrl
from sqlalchemy.exc import IntegrityError

from nightshift.api.deps import Conn, Org, State
from nightshift.api.input import Body
from nightshift.api.routers.params import PageQuery
from nightshift.batch.callbacks import check_callback_url
from nightshift.batch.steps import RunRequest, cancel_run, create_run
from nightshift.domain.batches import (
    BatchItem,
    BatchRun,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
    RunStatus,
    StepStatus,
)
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.pricing import BATCH_DISCOUNT
from nightshift.store import batches as batch_store
from nightshift.store.messages import to_message
from nightshift.store.pagination import Page

router = APIRouter(tags=["batches"])


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"] = "text"
    text: str


class InputMessage(BaseModel):
    """A message to the agent. System messages reach the model as user turns marked [system]."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["user", "system"] = "user"
    content: str | list[TextPart]

    def as_text(self) -> str:
        text = self.content if isinstance(self.content, str) else "\n".join(p.text for p in self.content)
        return f"[system] {text}" if self.role == "system" else text


class BatchRequestBody(BaseModel):
    """One agent of a run: its id and its messages (or Letta's ``input`` shorthand)."""

    model_config = ConfigDict(extra="ignore")
    agent_id: str = Field(min_length=1)
    messages: list[InputMessage] | None = None
    input: str | list[TextPart] | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)

    def texts(self) -> tuple[str, ...]:
        found = [m.as_text() for m in self.messages or ()]
        if self.input is not None:
            found.append(self.input if isinstance(self.input, str) else "\n".join(p.text for p in self.input))
        return tuple(found)


class BatchCreate(Body):
    requests: list[BatchRequestBody]
    callback_url: HttpUrl | None = None
    metadata: dict[str, Any] | None = None


class BatchRunPublic(BaseModel):
    """Letta's BatchJob, with nightshift's progress."""

    id: str
    status: str
    job_type: str = "batch"
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    metadata: dict[str, Any]
    callback_url: str | None
    callback_sent_at: datetime | None
    callback_status_code: int | None
    callback_error: str | None
    agent_id: None = None
    progress: dict[str, Any]


async def _public(conn: Conn, run: BatchRun) -> BatchRunPublic:
    progress = await batch_store.run_progress(conn, run.id)
    batches = await batch_store.provider_batches_of_run(conn, run.id)
    items = progress["items"]
    progress_body = {
        "step": progress["step"],
        "agents": {
            "running": items.get("running", 0),
            "finished": items.get("finished", 0),
            "failed": items.get("failed", 0),
            "cancelled": items.get("cancelled", 0),
        },
        "failures": await _failures(conn, batches) if items.get("failed") else [],
        "usage": progress["usage"],
        "cost_usd": round(progress["cost_usd"], 6),
        # The same tokens through the normal API: batch APIs bill at half price.
        "cost_without_batch_usd": round(progress["cost_usd"] / BATCH_DISCOUNT, 6),
        "provider_batches": [
            {
                "id": b.id,
                "provider": b.provider,
                "provider_batch_id": b.provider_batch_id,
                "step_number": b.step_number,
                "status": b.status.value,
                "provider_status": b.provider_status,
                "request_counts": b.request_counts,
                "error": b.error,
                "duplicates": list(b.duplicates),
                "created_at": b.created_at,
                "ended_at": b.ended_at,
            }
            for b in batches
        ],
    }
    return BatchRunPublic(
        id=run.id,
        status=run.status.value,
        created_at=run.created_at,
        updated_at=run.updated_at,
        completed_at=run.completed_at,
        metadata=run.metadata,
        callback_url=run.callback_url,
        callback_sent_at=run.callback_sent_at,
        callback_status_code=run.callback_status_code,
        callback_error=run.callback_error,
        progress=progress_body,
    )


async def _failures(conn: Conn, batches: list[ProviderBatch]) -> list[dict[str, Any]]:
    """The agents this run failed, with the step and the reason, in step order.

    An agent's last item in the run tells: a failed (or expired) request that was retried has a
    later item, so only one that was not shows up here. Whatever failed it counts: the provider's
    error, a batch the provider cancelled or expired, a request that could not be built.
    """
    last: dict[str, BatchItem] = {}
    for batch in batches:  # in step order
        for item in await batch_store.items_of(conn, batch.id):
            last[item.agent_id] = item
    return [
        {
            "agent_id": item.agent_id,
            "step_number": item.step_state.step_number,
            "request_status": item.request_status.value,
            "error": item.error,
        }
        for item in last.values()
        if item.step_status is StepStatus.COMPLETED and item.outcome == "failed"
    ]


async def _get(conn: Conn, org: str, run_id: str) -> BatchRun:
    run = await batch_store.get_run(conn, org, run_id)
    if run is None:
        raise NotFound(f"batch run {run_id} not found")
    return run


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="Makes creating a run safe to retry: the same key and body give the same run back",
    ),
]


@router.post("/v1/messages/batches")
async def create_batch(
    body: BatchCreate, state: State, org: Org, idempotency_key: IdempotencyKey = None
) -> BatchRunPublic:
    """Start a batch run: each agent gets its messages and is stepped until it stops.

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
    worker = state.worker
    digest = hashlib.sha256(orjson.dumps(body.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()
    if idempotency_key is not None:
        async with state.engine.connect() as conn:
            earlier = await _same_request(conn, org, idempotency_key, digest)
        if earlier is not None:
            return earlier
    callback_url = str(body.callback_url) if body.callback_url else None
    if callback_url is not None:
        await check_callback_url(callback_url, allow_private=state.settings.callback_allow_private)
    requests = [RunRequest(agent_id=r.agent_id, messages=r.texts(), max_steps=r.max_steps) for r in body.requests]
    try:
        async with state.engine.begin() as conn:
            run, batches = await create_run(
                conn,
                org,
                requests,
                callback_url=callback_url,
                default_max_steps=state.settings.default_max_steps,
                metadata=body.metadata,
                lease=worker.lease(datetime.now(UTC)),
                endpoints=worker.providers.endpoints(),
                idempotency_key=idempotency_key,
                request_hash=digest,
            )
    except (Conflict, IntegrityError):
        # The same request, sent twice at once: the first one made the run (and holds its agents).
        if idempotency_key is not None:
            async with state.engine.connect() as conn:
                earlier = await _same_request(conn, org, idempotency_key, digest)
            if earlier is not None:
                return earlier
        raise
    await worker.submit_new(batches)
    async with state.engine.connect() as conn:
        return await _public(conn, await _get(conn, org, run.id))


async def _same_request(conn: Conn, org: str, key: str, digest: str) -> BatchRunPublic | None:
    """The run an earlier request with this Idempotency-Key created, if it was this same request."""
    earlier = await batch_store.run_by_idempotency_key(conn, org, key)
    if earlier is None:
        return None
    if earlier.request_hash != digest:
        raise InvalidInput(
            f"Idempotency-Key {key!r} was used for another request (run {earlier.id}); use a new key",
            field="Idempotency-Key",
        )
    return await _public(conn, earlier)


@router.get("/v1/messages/batches")
async def list_batches(
    conn: Conn,
    org: Org,
    page: PageQuery,
    status: Annotated[list[RunStatus] | None, Query(description="Only runs with these statuses")] = None,
) -> list[BatchRunPublic]:
    """Batch runs of every status (filter with ``status``), oldest first (``order=desc`` for newest)."""
    runs = await batch_store.list_runs(conn, org, page, statuses=status or ())
    return [await _public(conn, run) for run in runs]


@router.get("/v1/messages/batches/{run_id}")
async def get_batch(run_id: str, conn: Conn, org: Org) -> BatchRunPublic:
    return await _public(conn, await _get(conn, org, run_id))


@router.get("/v1/messages/batches/{run_id}/messages")
async def batch_messages(
    run_id: str,
    conn: Conn,
    org: Org,
    agent_id: Annotated[str | None, Query()] = None,
    before: Annotated[str | None, Query()] = None,
    after: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
) -> dict[str, list[dict[str, Any]]]:
    """The run's messages (inputs, assistant and tool messages, heartbeats) by creation time."""
    await _get(conn, org, run_id)
    rows = await batch_store.run_messages(
        conn, run_id, Page(before=before, after=after, limit=limit, order=order), agent_id=agent_id
    )
    out = []
    for row in rows:
        message = to_message(row)
        content: list[dict[str, Any]] = []
        if message.reasoning:
            content.append({"type": "reasoning", "reasoning": message.reasoning, "is_native": False})
        if message.text:
            content.append({"type": "text", "text": message.text})
        out.append(
            {
                "id": message.id,
                "agent_id": message.agent_id,
                "role": message.role.value,
                "content": content,
                "name": message.name,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in message.tool_calls
                ],
                "tool_call_id": message.tool_call_id,
                "created_at": message.created_at,
                "batch_item_id": message.batch_item_id,
            }
        )
    return {"messages": out}


@router.get("/v1/messages/batches/{run_id}/agents")
async def batch_agents(
    run_id: str,
    conn: Conn,
    org: Org,
    after: Annotated[str | None, Query(description="Agents after this agent id")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, list[dict[str, Any]]]:
    """Each agent of the run (by agent id): its state, steps answered, tokens, cost and last error.

    ``state`` is running, finished, failed or cancelled; ``cost_without_batch_usd`` is what the
    same tokens cost through the normal API.
    """
    await _get(conn, org, run_id)
    out = []
    for agent_id, items in (await batch_store.run_agent_items(conn, run_id, after=after, limit=limit)).items():
        last = items[-1]
        usage: dict[str, int] = {}
        for item in items:
            for key, value in (item.usage or {}).items():
                usage[key] = usage.get(key, 0) + value
        cost = sum(item.cost_usd or 0.0 for item in items)
        state = "running" if last.step_status is StepStatus.PAUSED else (last.outcome or "finished")
        out.append(
            {
                "agent_id": agent_id,
                "state": state,
                "steps": sum(1 for i in items if i.request_status is RequestStatus.COMPLETED),
                "usage": usage,
                "cost_usd": round(cost, 6),
                "cost_without_batch_usd": round(cost / BATCH_DISCOUNT, 6),
                "error": last.error if state == "failed" else None,
            }
        )
    return {"agents": out}


@router.patch("/v1/messages/batches/{run_id}/cancel")
async def cancel_batch(run_id: str, state: State, org: Org) -> BatchRunPublic:
    """Cancel a run: no further steps, and its open provider batches are cancelled at the provider.

    Steps already applied stay applied. A step still open is never applied, even if its results
    had already arrived: those agents get no messages from it. A run that has ended is unchanged.
    """
    # Held under a name of this request's own: the poller may be working on these batches, and
    # its release must not free them while this request cancels them (one cancel, not two).
    lease = state.worker.own_lease(datetime.now(UTC))
    async with state.engine.begin() as conn:
        run = await cancel_run(conn, org, run_id, lease=lease)
        open_batches = [
            b
            for b in await batch_store.provider_batches_of_run(conn, run_id)
            if b.status is ProviderBatchStatus.CANCELLING
        ]
    for batch in open_batches:
        await state.worker.cancel(batch, owner=lease[0])
    async with state.engine.connect() as conn:
        return await _public(conn, await _get(conn, org, run.id))
