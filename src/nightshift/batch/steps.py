"""Creating runs and their steps in the database, and cancelling runs.

A new run is queued (``queue_batch_run``: the run and its requests, its agents reserved), and a poller
writes its first step from its requests (``write_first_step``, see ``batch/run_queue.py``).
A step is written in one transaction: the agents' input messages (the user's messages on the
first step, a heartbeat later), their context windows, the provider batches (status created,
one per provider, split by count and by the requests' estimated size) and one batch item per
agent. Submitting to the provider happens afterwards (``batch/worker.py``), from what was
written here, so that a crash in between only delays the submission.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.batch.decisions import StepEntry
from nightshift.domain.agents import Agent
from nightshift.domain.approvals import awaiting_conflict
from nightshift.domain.batch_split import estimated_request_bytes, split_by_size
from nightshift.domain.batches import (
    BatchItem,
    BatchRun,
    BatchRunKind,
    BatchRunRequest,
    BatchRunStatus,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
    StepState,
    StepStatus,
    refuse_repeated_agents,
)
from nightshift.domain.messages import Message
from nightshift.errors import Conflict, InvalidInput, NotFound
from nightshift.ids import new_id
from nightshift.providers.registry import provider_info
from nightshift.runtime.context import StepInputs, heartbeat_message, user_message
from nightshift.runtime.step import first_state
from nightshift.store import agents as agent_store
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import batch_summaries
from nightshift.store import items as item_store
from nightshift.store import messages as message_store
from nightshift.store import provider_batches as batch_store
from nightshift.store.agent_cache import AgentCache

# A step's agents on one provider and model go into provider batches of at most this many (and
# of at most the provider's byte limit of estimated requests, see ``domain.batch_split``), so
# that submitting or applying one batch holds a bounded working set; a step of up to this many
# agents of typical size is one batch.
BATCH_SLICE = 10_000
# Input text per run; the providers cap a batch's size (256 MB Anthropic, 200 MB OpenAI) and the
# rest of the request (system prompt, tools) must fit too.
MAX_INPUT_BYTES = 100 * 1024 * 1024
# Passes over a run's provider batches when cancelling it, should workers move them on meanwhile.
CANCEL_PASSES = 10
# A queued run's error when none of its agents is left to step.
EVERY_AGENT_DELETED = "every agent of the run was deleted before its first step"


@dataclass(frozen=True, slots=True)
class WrittenBatch:
    """A provider batch ``write_step`` wrote, with its items and their agents as it wrote them,
    and the messages of their windows that the step had in hand (``StepInputs.known``: shared by
    the step's batches).

    Submitting it at once needs no read of what was just written (``batch/submission.py`` reads
    again only the agents that changed since, and the messages of the others' windows it was not
    handed).
    """

    batch: ProviderBatch
    items: list[BatchItem]
    agents: dict[str, Agent]
    messages: Mapping[str, Message]


async def queue_batch_run(
    conn: AsyncConnection,
    org_id: str,
    requests: Sequence[BatchRunRequest],
    *,
    now: datetime,
    callback_url: str | None,
    default_max_steps: int,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    kind: BatchRunKind = BatchRunKind.MAIN,
    deadline_at: datetime | None = None,
) -> BatchRun:
    """Validate the requests, reserve their agents and write the run (created) with its requests,
    queued for a poller to write its first step (``write_first_step``); nothing is written on error.

    Only what needs no agent loaded is done here: a run of ten thousand agents is answered at
    once, and its first step is built by the poller. ``idempotency_key`` and ``request_hash`` are
    stored with the run, so that a retry of the same request finds it (see ``run_by_idempotency_key``).
    ``deadline_at``: when the run is to be done by (see ``domain/deadlines.py``).

    Raises:
        InvalidInput: no requests, the same agent twice, empty messages, too much input, or more
            agents for one provider than its batch limit.
        NotFound: an agent that does not exist (or belongs to another organization).
        Conflict: an agent that is already in an open step (or a queued run) of another run, or in
            a synchronous step.
    """
    await _check_requests(conn, org_id, requests, now)
    run = BatchRun(
        id=new_id("batch"),
        organization_id=org_id,
        status=BatchRunStatus.CREATED,
        metadata=metadata or {},
        max_steps=default_max_steps,
        callback_url=callback_url,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        kind=kind,
        deadline_at=deadline_at,
        queued_agents=len(requests),
        created_at=now,
        updated_at=now,
    )
    await batch_run_store.insert_run(conn, run)
    await batch_run_store.queue_requests(conn, run.id, [r.to_json() for r in requests])
    return run


async def _check_requests(
    conn: AsyncConnection, org_id: str, requests: Sequence[BatchRunRequest], now: datetime
) -> None:
    """``queue_batch_run``'s checks; the agents' rows stay locked (PostgreSQL) until the run is written."""
    if not requests:
        raise InvalidInput("requests must hold at least one request", field="requests")
    ids = [r.agent_id for r in requests]
    refuse_repeated_agents(ids)
    turns = [r.messages for r in requests]
    size = sum(len(t.text.encode()) + sum(len(i.data or i.url or "") for i in t.images) for ts in turns for t in ts)
    if size > MAX_INPUT_BYTES:
        raise InvalidInput(f"the messages hold {size} bytes; a run takes at most {MAX_INPUT_BYTES}", field="requests")
    for index, request in enumerate(requests):
        if not request.answered and not any(t.text.strip() or t.images for t in turns[index]):
            raise InvalidInput(f"requests[{index}] has no message text", field=f"requests.{index}.messages")
        if request.max_steps is not None and request.max_steps < 1:
            raise InvalidInput("max_steps must be at least 1", field=f"requests.{index}.max_steps")
    providers = await agent_store.providers_of(conn, org_id, ids)
    missing = [i for i in ids if i not in providers]
    if missing:
        raise NotFound(f"agents not found: {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}")
    await agent_store.lock_agents(conn, ids)
    busy = await item_store.agents_in_open_steps(conn, ids)
    busy |= await agent_store.agents_stepping(conn, ids, now)
    if busy:
        raise Conflict(
            f"agents already stepping (in an open step of another run, or synchronously): "
            f"{', '.join(sorted(busy)[:10])}; wait for that to finish or cancel the run"
        )
    await _refuse_awaiting(conn, [r.agent_id for r in requests if not r.answered])
    for provider, count in Counter(providers.values()).items():
        limit = provider_info(provider).max_batch_requests
        if count > limit:
            raise InvalidInput(
                f"{count} agents on {provider}: one run takes at most {limit} per provider", field="requests"
            )


async def _refuse_awaiting(conn: AsyncConnection, agent_ids: Sequence[str]) -> None:
    """Refuse messages for agents that await an answer to an approval request (one statement)."""
    for agent_id, request in (await message_store.awaiting_approval(conn, agent_ids)).items():
        raise awaiting_conflict(agent_id, request)


async def write_first_step(
    conn: AsyncConnection,
    run: BatchRun,
    requests: Sequence[BatchRunRequest],
    now: datetime,
    *,
    lease: tuple[str, datetime] | None = None,
    endpoints: Mapping[str, str],
    summary_model: str | None = None,
    batch_bytes: int | None = None,
    kept: AgentCache | None = None,
) -> list[ProviderBatch | WrittenBatch]:
    """Write a queued run's first step from its requests (see ``write_step``).

    An agent deleted since the run was queued is left out (it has nothing left to step); a run
    left with none ends failed. The caller deletes the queued requests in the same transaction.
    A run of one slice (``BATCH_SLICE`` agents at most, as most are) returns its batches as
    written, which the caller submits without reading them back; a larger one returns only the
    batches, so that it never holds more than a slice's agents (each is read back at its submit).
    ``kept``: the agents a poller kept as it submitted them (``store/agent_cache.py``), which it
    loads through.
    """
    load = kept.load if kept is not None else agent_store.load_agents
    ids = [r.agent_id for r in requests]
    # A run of one slice is loaded whole at once; a larger one is put in order by its agents'
    # models alone first, then loaded a slice at a time.
    loaded: dict[str, Agent] | None = None
    if len(ids) <= BATCH_SLICE:
        loaded = await load(conn, run.organization_id, ids)
        configs = {agent_id: agent.llm_config for agent_id, agent in loaded.items()}
    else:
        configs = await agent_store.llm_configs_of(conn, run.organization_id, ids)
    present = [r for r in requests if r.agent_id in configs]
    if not present:
        await batch_run_store.set_run_status(
            conn, run.id, BatchRunStatus.FAILED, now, only_from=(BatchRunStatus.CREATED,), error=EVERY_AGENT_DELETED
        )
        return []
    # Written BATCH_SLICE agents at a time (a provider batch's worth), so that a run of 100,000
    # agents never holds them all loaded at once; in order of model, so that a slice is mostly
    # one provider batch rather than a piece of each.
    by_model = sorted(present, key=lambda r: configs[r.agent_id].handle)
    batches: list[ProviderBatch | WrittenBatch] = []
    for start in range(0, len(by_model), BATCH_SLICE):
        part = by_model[start : start + BATCH_SLICE]
        agents = loaded if loaded is not None else await load(conn, run.organization_id, [r.agent_id for r in part])
        entries = [
            StepEntry(
                agent=agents[r.agent_id],
                state=first_state(agents[r.agent_id], r.max_steps or run.max_steps, client_tools=r.client_tools),
                inputs=r.messages,
                heartbeat=r.answered,  # the answer is in its window: the model reacts to it
            )
            for r in part
        ]
        written = await write_step(
            conn,
            run,
            entries,
            now,
            lease=lease,
            endpoints=endpoints,
            summary_model=summary_model,
            batch_bytes=batch_bytes,
            systems=kept.first_messages(e.agent for e in entries) if kept is not None else None,
        )
        batches += written if len(by_model) <= BATCH_SLICE else [w.batch for w in written]
    return batches


async def write_step(
    conn: AsyncConnection,
    run: BatchRun,
    entries: Sequence[StepEntry],
    now: datetime,
    *,
    lease: tuple[str, datetime] | None = None,
    endpoints: Mapping[str, str],
    summary_model: str | None = None,
    batch_bytes: int | None = None,
    systems: Mapping[str, Message] | None = None,
) -> list[WrittenBatch]:
    """Write one step for ``entries``: provider batches, items, input messages, context windows.

    ``lease`` (owner, expiry) reserves the new provider batches for the caller, who submits them
    at once; should it fail to, the poller takes them over when the lease expires. ``endpoints``
    are the provider base URLs they go to: only a worker that reaches the same takes them.
    An agent whose window would overflow gets the request that summarizes its oldest messages
    instead (by ``summary_model``, or its own model), and its step waits for it (see
    ``runtime.context.StepInputs``). A provider batch holds at most ``BATCH_SLICE`` requests and
    ``batch_bytes`` (by default, and at most, the provider's limit) of their estimated size (see
    ``domain.batch_split``). ``systems``: system messages of the agents as stored and compiled
    from their prompts and blocks as they are (see ``StepInputs``).
    """
    if not entries:
        return []
    inputs = StepInputs(now, summary_model=summary_model, systems=systems)
    item_ids: dict[str, str] = {}
    for entry in entries:
        item_ids[entry.agent.id] = item_id = new_id("batch_item")
        messages: list[Message] = [
            user_message(entry.agent, t.text, now, batch_item_id=item_id, images=t.images, otid=t.otid, name=t.name)
            for t in entry.inputs
            if t.text.strip() or t.images
        ]
        if entry.heartbeat:
            messages.append(heartbeat_message(entry.agent, now, batch_item_id=item_id))
        inputs.add(entry.agent, messages, before=entry.last_request_tokens, batch_item_id=item_id)
    await inputs.prepare(conn)
    # One provider batch per provider, and per model where the provider takes one model per
    # batch (OpenAI); an Anthropic batch mixes models. A step that waits for a summary goes to
    # the summarizing model's.
    groups: dict[tuple[str, str], list[tuple[StepEntry, StepState]]] = defaultdict(list)
    for entry in entries:
        plan = inputs.summaries.get(entry.agent.id)
        state = entry.state if plan is None and entry.state.summary is None else replace(entry.state, summary=plan)
        provider, model = (
            plan.model.split("/", 1) if plan else (entry.agent.llm_config.provider, entry.agent.llm_config.model)
        )
        groups[provider, model if provider_info(provider).one_model_per_batch else ""].append((entry, state))
    written: list[WrittenBatch] = []
    for (provider, _model), group in groups.items():
        info = provider_info(provider)
        sizes = [_estimated_bytes(entry, state, inputs) for entry, state in group]
        max_count = min(info.max_batch_requests, BATCH_SLICE)
        max_bytes = min(info.max_batch_bytes, batch_bytes or info.max_batch_bytes)
        for part in split_by_size(sizes, max_count=max_count, max_bytes=max_bytes):
            chunk = group[part.start : part.stop]
            batch = ProviderBatch(
                id=new_id("llm_batch"),
                organization_id=run.organization_id,
                batch_run_id=run.id,
                provider=provider,
                endpoint=endpoints.get(provider),
                step_number=max(state.step_number for _, state in chunk),
                status=ProviderBatchStatus.CREATED,
                deadline_at=run.deadline_at,
                model=_one_model(chunk),
                created_at=now,
                updated_at=now,
            )
            items = [
                BatchItem(
                    id=item_ids[entry.agent.id],
                    organization_id=run.organization_id,
                    batch_run_id=run.id,
                    provider_batch_id=batch.id,
                    agent_id=entry.agent.id,
                    request_status=RequestStatus.CREATED,
                    step_status=StepStatus.PAUSED,
                    step_state=state,
                    created_at=now,
                    updated_at=now,
                )
                for entry, state in chunk
            ]
            agents = {entry.agent.id: inputs.agents[entry.agent.id] for entry, _ in chunk}  # as written
            written.append(WrittenBatch(batch, items, agents, inputs.known))
    counts = {w.batch.id: len(w.items) for w in written}
    await batch_store.insert_provider_batches(conn, [w.batch for w in written], items=counts, lease=lease)
    await item_store.insert_items(conn, [item for w in written for item in w.items])
    await inputs.write(conn)
    return written


def _estimated_bytes(entry: StepEntry, state: StepState, inputs: StepInputs) -> int:
    """The estimated size of an agent's request in this step: its window (or the summary it waits
    for) in tokens, and the images of its input."""
    if state.summary is not None:
        tokens = state.summary.evicted_tokens
    else:
        tokens = inputs.agents[entry.agent.id].context_tokens or 0
    images = (i.images for i in entry.inputs)
    return estimated_request_bytes(tokens, image_bytes=sum(len(m.data or m.url or "") for ms in images for m in ms))


def _one_model(chunk: Sequence[tuple[StepEntry, StepState]]) -> str | None:
    """The model of every request of a provider batch (a summary's is the summarizing model's),
    or None when they are of several."""
    models = {
        state.summary.model.split("/", 1)[1] if state.summary else entry.agent.llm_config.model
        for entry, state in chunk
    }
    return models.pop() if len(models) == 1 else None


async def cancel_batch_run(
    conn: AsyncConnection, org_id: str, run_id: str, now: datetime, *, lease: tuple[str, datetime] | None = None
) -> BatchRun:
    """Cancel a run at ``now``: no further steps; its open provider batches are cancelled at the provider.

    Results already applied stay applied. A provider batch still open when the run is cancelled
    is never applied, even if its results have already arrived: its agents get no messages from
    that step. Cancelling a run that has ended changes nothing.

    ``lease`` (owner, expiry) reserves the batches to cancel at the provider for the caller, who
    does it at once, so that a poller does not send the same cancel too; should the caller fail
    to, the poller takes them over when the lease expires.
    """
    run = await batch_run_store.get_run(conn, org_id, run_id)
    if run is None:
        raise NotFound(f"batch run {run_id} not found")
    moved = await batch_run_store.set_run_status(
        conn, run_id, BatchRunStatus.CANCELLED, now, only_from=(BatchRunStatus.CREATED, BatchRunStatus.RUNNING)
    )
    if moved:  # a run still queued ends without a step, and frees its agents
        await batch_run_store.forget_queued_requests(conn, run_id)
    # A worker may move a batch on while we cancel it (submitted: created -> running; applied,
    # with the next step written), so a batch whose compare-and-set missed is read again, and so
    # are the run's batches, until none is left open.
    for _ in range(CANCEL_PASSES if moved else 0):
        missed = False
        for batch in await batch_store.provider_batches_of_run(conn, run_id):
            if batch.status not in (
                ProviderBatchStatus.CREATED,
                ProviderBatchStatus.RUNNING,
                ProviderBatchStatus.ENDED,
            ):
                continue
            if batch.provider_batch_id:  # the provider must be told
                moved_on = await batch_store.mark_cancelling(
                    conn, batch.id, now, only_from=(batch.status,), lease=lease
                )
            else:
                moved_on = await batch_store.mark_cancelled(conn, batch.id, now, only_from=(batch.status,))
            if moved_on:
                await item_store.cancel_items(conn, batch.id, now)
                await batch_summaries.record_summaries(conn, [batch.id])
            else:
                missed = True
        if not missed:
            break
    found = await batch_run_store.get_run(conn, org_id, run_id)
    assert found is not None
    return found
