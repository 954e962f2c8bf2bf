"""Polling a running provider batch until it ends, and applying its results to its agents.

* poll: ask the provider; when the batch has ended, store every item's result in the same
  transaction that moves it running -> ended (an item it never answered fails, saying so).
* resume: run the tools first (outside any transaction, so a slow tool never holds the
  database), then in one transaction write the messages, memory edits and the next step, mark
  the items completed and the batch ended -> applied; the run ends when nothing is left open.

Tool side effects happen at least once (a crash after the tools ran but before the write runs
them again); everything in the database happens exactly once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.batch import takeover
from nightshift.batch.decisions import final_status, next_step
from nightshift.batch.leases import Leases
from nightshift.batch.outcomes import failed_result, outcome_result
from nightshift.batch.stages import Outcome, Stage, StageOutcome, StageParts, stage_done
from nightshift.batch.steps import write_step
from nightshift.batch.submission import end_batch
from nightshift.domain.answers import Route
from nightshift.domain.batches import (
    BatchItem,
    BatchRunKind,
    BatchRunStatus,
    ItemOutcome,
    ItemResult,
    PollSnapshot,
    ProviderBatch,
    ProviderBatchStatus,
    RequestStatus,
    StepStatus,
)
from nightshift.domain.costs import Costs
from nightshift.domain.deadlines import Waiting, done_share, in_tail
from nightshift.domain.usage import Usage
from nightshift.errors import ProviderError
from nightshift.metrics import ErrorScope, Metrics
from nightshift.providers.base import BatchOutcome, BatchState, BatchStatus, OutcomeStatus
from nightshift.providers.registry import provider_info
from nightshift.runtime.persist import write_summaries, write_turns
from nightshift.runtime.search import StoreSearch
from nightshift.runtime.step import Turn, take_turns
from nightshift.runtime.window import Summary
from nightshift.store import agents as agent_store
from nightshift.store import batch_run_views, batch_summaries
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import groups as group_store
from nightshift.store import items as item_store
from nightshift.store import provider_batches as batch_store

log = logging.getLogger(__name__)

# An ended batch's results are stored this many at a time as they are read (see ``poll``).
RESULT_SLICE = 2_000


def snapshot_of(status: BatchStatus, now: datetime) -> PollSnapshot:
    """What a poll saw, as stored on the provider batch."""
    counts = status.counts
    return PollSnapshot(
        provider_status=status.provider_status,
        request_counts={
            "processing": counts.processing,
            "succeeded": counts.succeeded,
            "errored": counts.errored,
            "canceled": counts.canceled,
            "expired": counts.expired,
        },
        polled_at=now,
    )


async def poll(parts: StageParts, leases: Leases, batch: ProviderBatch) -> StageOutcome:
    """Ask the provider about a running batch; when it has ended, store every result (keeping the
    lease: ``ENDED``, to be applied at once); while it runs, record the poll (``POLLED``)."""
    assert batch.provider_batch_id is not None
    started = time.monotonic()
    provider = parts.providers.get(batch.provider)
    try:
        status = await provider.retrieve_batch(batch.provider_batch_id)
    except ProviderError as exc:
        log.warning("polling %s failed (%s)", batch.id, exc.message)
        return StageOutcome(outcome=Outcome.FAILED, batch=batch, reason=exc.message, retryable=exc.retryable)
    snapshot = snapshot_of(status, parts.clock.now())
    if status.state is not BatchState.ENDED:
        return await _polled(parts, leases, batch, snapshot)
    async with parts.engine.connect() as conn:
        # Items that failed before they went in (their request could not be built) keep that result.
        waiting = await item_store.awaiting_results(conn, batch.id)
    # The results are read as a stream and stored a slice at a time, each in a transaction of its
    # own, so that a batch's results are never all held; the last slice goes with the transition
    # (running -> ended). A poll cut short stores them again, the same: they are only stored on
    # items whose step is open, and only applied once the batch has ended (meanwhile a run's
    # agents view may count an answered request a moment early).
    results: list[ItemResult] = []
    answered = 0
    errors: Counter[str] = Counter()
    try:
        async with contextlib.aclosing(provider.batch_results(batch.provider_batch_id)) as outcomes:
            async for custom_id, outcome in outcomes:
                item_id = waiting.pop(custom_id, None)
                if item_id is None:
                    continue
                results.append(outcome_result(item_id, outcome))
                if outcome.status is OutcomeStatus.ERRORED and outcome.error is not None:
                    errors[outcome.error.type] += 1  # expired and cancelled requests are no provider error
                if len(results) >= RESULT_SLICE:
                    async with parts.engine.begin() as conn:
                        await item_store.store_results(conn, results, parts.clock.now())
                    answered += len(results)
                    results = []
    except ProviderError as exc:
        log.warning("reading the results of %s failed (%s)", batch.id, exc.message)
        return StageOutcome(outcome=Outcome.FAILED, batch=batch, reason=exc.message, retryable=exc.retryable)
    answered += len(results)
    for item_id in waiting.values():  # a request the provider never answered
        if status.unanswered is OutcomeStatus.ERRORED:
            results.append(failed_result(item_id, "the provider returned no result for this request"))
        else:  # it expired or was cancelled before it ran, as its batch did
            results.append(outcome_result(item_id, BatchOutcome(status=status.unanswered)))
    ended = await end_batch(
        parts,
        leases,
        batch,
        results,
        only_from=ProviderBatchStatus.RUNNING,
        error=status.error,
        snapshot=snapshot,
        release=False,  # resume follows at once in this pass
    )
    if status.error is None and batch.submit_started_at is not None and batch.takeover_at is None:
        parts.metrics.batch_ended(batch.provider, (snapshot.polled_at - batch.submit_started_at).total_seconds())
    for kind, count in errors.items():
        parts.metrics.provider_error(batch.provider, kind, ErrorScope.REQUEST, count)
    stage_done(Stage.POLL, ended, agents=answered + len(waiting), started=started, metrics=parts.metrics)
    return StageOutcome(outcome=Outcome.ENDED, batch=ended)


async def _polled(parts: StageParts, leases: Leases, batch: ProviderBatch, snapshot: PollSnapshot) -> StageOutcome:
    """Record a poll of a batch still running, and when it is polled next. A batch of a run with
    a deadline is cancelled at its provider when its open requests are to be taken over (see
    ``domain/deadlines.py``), and polled at the shortest gap until the cancel has ended it."""
    now = snapshot.polled_at
    next_poll_at = await parts.poll_schedule.next_poll_at(batch, now)
    tail_at, takeover_at = None, None
    if batch.takeover_at is not None:  # cancelled for a take-over: it ends soon
        next_poll_at = now + parts.poll_schedule.shortest
    elif batch.deadline_at is not None:
        waiting = await _waiting(parts, batch, snapshot)
        tail_at = waiting.tail_began(now)
        reason = waiting.reason(now)
        if reason is None:
            next_poll_at = min(next_poll_at, waiting.decides_next(now))
        else:
            refused = await takeover.begin(parts, batch, reason, snapshot.request_counts)
            if refused is not None:
                return StageOutcome(outcome=Outcome.FAILED, batch=batch, reason=refused, retryable=True)
            takeover_at, next_poll_at = now, now + parts.poll_schedule.shortest
    async with parts.engine.begin() as conn:
        await batch_store.record_poll(
            conn, batch.id, leases.owner, snapshot, next_poll_at=next_poll_at, tail_at=tail_at, takeover_at=takeover_at
        )
    return StageOutcome(outcome=Outcome.POLLED, batch=batch)


async def _waiting(parts: StageParts, batch: ProviderBatch, snapshot: PollSnapshot) -> Waiting:
    """A batch of a run with a deadline as its poll saw it, for ``domain/deadlines.py``'s rule."""
    assert batch.deadline_at is not None
    submitted = batch.submit_started_at or batch.created_at
    if provider_info(batch.provider).counts_progress:
        tail_at = batch.tail_at or (snapshot.polled_at if in_tail(snapshot.request_counts) else None)
        done = done_share(snapshot.request_counts)
        return Waiting(deadline=batch.deadline_at, submitted_at=submitted, done=done, tail_at=tail_at)
    turnaround = (await parts.poll_schedule.turnarounds(snapshot.polled_at)).get(batch.provider, batch.model)
    usual = turnaround.p90 if turnaround is not None else None
    return Waiting(deadline=batch.deadline_at, submitted_at=submitted, usual=usual, tail_at=batch.tail_at)


async def resume(parts: StageParts, leases: Leases, batch: ProviderBatch) -> StageOutcome:
    """Apply an ended batch's results: ``APPLIED``, with the next step's batches, written and
    leased, to submit (``LEFT`` when another worker applied it, or the run was cancelled, meanwhile)."""
    started = time.monotonic()
    async with parts.engine.connect() as conn:
        # Items closed early (their agent left the run: cancelled, or deleted) are never applied.
        items = [i for i in await item_store.items_of(conn, batch.id) if i.step_status is StepStatus.PAUSED]
        agents = await parts.load_agents(conn, batch.organization_id, [i.agent_id for i in items])
        answered = [
            (item, response)
            for item in items
            if item.agent_id in agents
            and item.request_status is RequestStatus.COMPLETED
            and item.result is not None
            and (response := item.result.response) is not None
        ]
        turns = [
            Turn(
                agent=agents[item.agent_id],
                state=item.step_state,
                response=response,
                batch_item_id=item.id,
                read_at=item.created_at,  # the request was built as the step was written
            )
            for item, response in answered
            if item.step_state.summary is None
        ]
        results = await take_turns(turns, search=StoreSearch(conn), sandbox=parts.sandbox, now=parts.clock.now())
    summaries = [
        Summary(agent_id=item.agent_id, plan=item.step_state.summary, text=response.text or "", batch_item_id=item.id)
        for item, response in answered
        if item.step_state.summary is not None
    ]
    now = parts.clock.now()
    async with parts.engine.begin() as conn:
        await batch_run_store.lock_run(conn, batch.batch_run_id)
        if not await batch_store.mark_applied(conn, batch.id, now):
            return StageOutcome(outcome=Outcome.LEFT, batch=batch)  # applied (or cancelled) by someone else meanwhile
        run = await batch_run_store.get_run(conn, batch.organization_id, batch.batch_run_id)
        assert run is not None
        # Under the run's lock, what decides is the items as stored now: an agent that left the
        # run since the read (``cancel_agent.leave_runs`` takes the same lock) gets nothing of it.
        if await item_store.count_open_items(conn, batch.id) < len(items):  # (an index count: cheap)
            still_open = await item_store.open_item_ids(conn, batch.id)
            items = [i for i in items if i.id in still_open]
            kept = {i.agent_id for i in items}
            results = [r for r in results if r.agent_id in kept]
            summaries = [s for s in summaries if s.agent_id in kept]
            agents = {agent_id: agent for agent_id, agent in agents.items() if agent_id in kept}
        # Agents may have changed since the read (another run's step, an API edit).
        fresh = await agent_store.reload_changed(conn, batch.organization_id, agents)
        updated = await write_turns(conn, fresh, results, now)
        summarized = await write_summaries(conn, fresh, summaries, now)
        run_open = run.status in (BatchRunStatus.CREATED, BatchRunStatus.RUNNING)
        # Agents without a result (a failed request to retry) are in ``fresh`` only.
        stored = {**fresh, **updated, **summarized}
        completions, entries = next_step(
            items, {r.agent_id: r for r in results}, stored, run_open=run_open, summarized=summarized.keys()
        )
        usage = _Usage()
        for index, item in enumerate(items):
            agent = fresh.get(item.agent_id)
            if item.usage and agent is not None:
                # A summary is priced at the model that wrote it.
                handle = item.step_state.summary.model if item.step_state.summary else agent.llm_config.handle
                cost = _priced(parts, handle, item)
                completions[index] = replace(completions[index], cost=cost)
                provider, model = handle.split("/", 1)
                usage.add(provider, model, item.usage, cost.usd if cost else None)
        await item_store.complete_items(conn, completions, now)
        # A main agent's finished turn counts towards its sleep-time group (and may make it due).
        turned = [
            item.agent_id
            for item, done in zip(items, completions, strict=True)
            if done.outcome is ItemOutcome.FINISHED and (agent := fresh.get(item.agent_id)) and agent.managed_group_id
        ]
        await group_store.count_turns(conn, turned, now)
        await batch_summaries.record_summaries(conn, [batch.id])  # its items are final: the views read this
        next_batches = await write_step(
            conn,
            run,
            entries,
            now,
            lease=leases.lease(),
            endpoints=parts.providers.endpoints(),
            summary_model=parts.summary_model,
            batch_bytes=parts.batch_bytes,
            systems=parts.agents.first_messages(e.agent for e in entries) if parts.agents is not None else None,
        )
        if not next_batches:
            await end_run_if_done(conn, run.id, now)
        await batch_store.release(conn, batch.id, leases.owner, next_poll_at=None)
    if parts.agents is not None:
        # Those that go on are kept as their next step is submitted; the others as they are now.
        going_on = {entry.agent.id for entry in entries}
        parts.agents.keep(agent for agent_id, agent in stored.items() if agent_id not in going_on)
    usage.record(parts.metrics, run.kind)
    stage_done(Stage.APPLY, batch, agents=len(items), started=started, metrics=parts.metrics)
    return StageOutcome(outcome=Outcome.APPLIED, batch=batch, next_batches=next_batches)


def _priced(parts: StageParts, handle: str, item: BatchItem) -> Costs | None:
    """What an answered item cost on ``handle``: at the batch price, or at its route's when it
    was taken over for a deadline, with what that cost above the batch price."""
    assert item.usage is not None
    route = item.result.route if item.result is not None else Route.BATCH
    cost = parts.prices.cost(handle, item.usage, batch=route is not Route.NORMAL)
    if route is Route.BATCH or cost is None:
        return cost
    in_batch = parts.prices.cost(handle, item.usage, batch=True)
    return replace(cost, takeover_usd=cost.usd - in_batch.usd if in_batch is not None else 0.0)


class _Usage:
    """The tokens and cost of a step's items, summed by provider and model, for the metrics."""

    def __init__(self) -> None:
        self.tokens: defaultdict[tuple[str, str], Usage] = defaultdict(Usage)
        self.cost: defaultdict[tuple[str, str], float] = defaultdict(float)

    def add(self, provider: str, model: str, tokens: Usage, cost_usd: float | None) -> None:
        self.tokens[provider, model] += tokens
        self.cost[provider, model] += cost_usd or 0.0

    def record(self, metrics: Metrics, run_kind: BatchRunKind) -> None:
        for (provider, model), tokens in self.tokens.items():
            metrics.usage(provider, model, tokens, self.cost[provider, model], run_kind=run_kind)


async def end_run_if_done(conn: AsyncConnection, run_id: str, now: datetime) -> None:
    """End the run when none of its provider batches is open (see ``decisions.final_status``)."""
    if await batch_store.open_batches_of_run(conn, run_id) > 0:
        return
    status = final_status(await batch_run_views.run_progress(conn, run_id))
    await batch_run_store.set_run_status(
        conn, run_id, status, now, only_from=(BatchRunStatus.CREATED, BatchRunStatus.RUNNING)
    )
