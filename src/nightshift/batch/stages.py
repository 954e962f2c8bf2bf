"""The stages a provider batch goes through: what they use, what they return, and the one log
line of each, with its fields, its duration in the metrics and, with tracing on, its span.

A stage (``submission.submit``, ``application.poll`` and ``resume``, the worker's cancel and
give-up) writes its own transition and returns a ``StageOutcome``: what happened. It never
decides what comes next for the lease: the worker's loop does, from the outcome (give the lease
back, due again later; count a failure and give the stage up in the end; submit the next step).

Each line says which run, step and provider batch, how many agents and how long the stage took,
in its message and as fields (``extra=``) that the JSON log format writes as they are. Nothing
of the agents' messages, tool arguments or secrets is in it. The same duration goes into the
``nightshift_stage_duration_seconds`` histogram, so the logs and the metrics agree.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.polling import PollSchedule
from nightshift.batch.steps import WrittenBatch
from nightshift.clock import Clock
from nightshift.domain.agents import Agent
from nightshift.domain.batches import BatchItem, ItemResult, ProviderBatch
from nightshift.domain.caching import CachePolicy
from nightshift.metrics import Metrics
from nightshift.pricing import PriceTable
from nightshift.providers.clients import ProviderSet
from nightshift.providers.spool import EncodedRequests
from nightshift.store import agents as agent_store
from nightshift.store.agent_cache import AgentCache
from nightshift.store.message_cache import MessageCache
from nightshift.tools.sandbox import Sandbox
from nightshift.tracing import stage_span

log = logging.getLogger(__name__)


class Stage(StrEnum):
    """A stage of a provider batch that logs a line when it is done."""

    SUBMIT = "submit"  # sent to its provider (created -> running)
    POLL = "poll"  # ended at the provider, every result stored (running -> ended)
    APPLY = "apply"  # results applied to the agents, the next step written (ended -> applied)
    CANCEL = "cancel"  # cancelled at the provider for a cancelled run (cancelling -> cancelled)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageParts:
    """What the stages use: the process's parts and the settings of the batch work, read once."""

    engine: AsyncEngine
    providers: ProviderSet
    sandbox: Sandbox
    prices: PriceTable
    metrics: Metrics
    clock: Clock
    # The longest wait between two polls of a running batch (and two passes of the poller).
    poll_interval: timedelta
    # When each running batch is polled next, within that interval.
    poll_schedule: PollSchedule
    # How the prompt-cache breakpoints of the steps' requests are chosen (``domain/caching.py``).
    cache_policy: CachePolicy = CachePolicy.AUTO
    # The model that summarizes agents' evicted messages (provider/model); None: each agent's own.
    summary_model: str | None = None
    # The most bytes of requests in one provider batch, estimated when a step is written and real
    # when it is sent (``Settings.batch_bytes``); None: the provider's limit.
    batch_bytes: int | None = None
    # The messages the submits read, kept for the next steps' (``store/message_cache.py``); None: none kept.
    messages: MessageCache | None = None
    # The agents the submits sent, kept for the next steps' (``store/agent_cache.py``); None: none kept.
    agents: AgentCache | None = None

    async def load_agents(self, conn: AsyncConnection, org_id: str, ids: Sequence[str]) -> dict[str, Agent]:
        """``agents.load_agents``, through the agents kept when there are."""
        if self.agents is None:
            return await agent_store.load_agents(conn, org_id, ids)
        return await self.agents.load(conn, org_id, ids)


class Outcome(StrEnum):
    """What a stage did to a provider batch, for the worker's loop to act on."""

    SUBMITTED = "submitted"  # sent (or adopted): created -> running, to be polled
    WAITING = "waiting"  # nothing changed: to be looked at again (``due_in``)
    POLLED = "polled"  # still running at the provider: the poll recorded, the lease given back
    ENDED = "ended"  # every result stored (-> ended): applied next (a poll) or due at once
    APPLIED = "applied"  # results applied (ended -> applied): ``next_batches`` to submit
    CANCELLED = "cancelled"  # cancelling -> cancelled, the lease given back
    FAILED = "failed"  # the stage failed (``reason``, ``retryable``): counted, tried again or given up
    # The provider refused a submission for a reason that may pass: sent again after a backoff
    # (the submission's own count: it gives the batch's agents up itself after a few).
    RESUBMIT = "resubmit"
    LEFT = "left"  # moved on meanwhile (taken over, cancelled, applied elsewhere): nothing to do


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """A created batch with its requests built, to be sent as it is: a part of a batch cut by the
    requests' real sizes (``submission._split``).

    ``requests``: each encoded for the provider (``BatchProvider.encode_request``), by custom_id
    (the agent's id), in the items' order; ``refused``: the results of the items whose request
    could not be built.
    """

    batch: ProviderBatch
    items: Sequence[BatchItem]
    requests: EncodedRequests
    refused: Sequence[ItemResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class StageOutcome:
    """What a stage did, with the batch as it is now.

    ``due_in``: the lease is to be given back, the batch due again after that long (None: the
    stage's own transition gave it back, or nothing is to be done).
    """

    outcome: Outcome
    batch: ProviderBatch
    due_in: timedelta | None = None
    reason: str | None = None
    retryable: bool = False
    # Batches the stage wrote, leased to its owner, to be submitted now (the next step; the
    # other parts of a batch cut by size).
    next_batches: Sequence[WrittenBatch | Prepared] = ()


_DONE = {
    Stage.SUBMIT: "submitted",
    Stage.POLL: "stored the results of",
    Stage.APPLY: "applied",
    Stage.CANCEL: "cancelled",
}


def stage_done(
    stage: Stage,
    batch: ProviderBatch,
    *,
    agents: int,
    started: float,
    metrics: Metrics,
    provider_batch_id: str | None = None,
) -> None:
    """Log that ``stage`` of ``batch`` is done, count its duration in ``metrics`` and trace it;
    ``started`` is when it began (``time.monotonic()``: a duration is measured, whatever the clock
    the stages decide by says)."""
    seconds = time.monotonic() - started
    metrics.stage_done(stage.value, batch.provider, seconds)
    duration_ms = round(seconds * 1000)
    provider_id = provider_batch_id or batch.provider_batch_id
    fields = {
        "stage": stage.value,
        "run_id": batch.batch_run_id,
        "step": batch.step_number,
        "batch_id": batch.id,
        "provider": batch.provider,
        "provider_batch_id": provider_id,
        "agents": agents,
    }
    log.info(
        "run %s step %d: %s provider batch %s (%s %s) of %d agents in %d ms",
        batch.batch_run_id,
        batch.step_number,
        _DONE[stage],
        batch.id,
        batch.provider,
        provider_id,
        agents,
        duration_ms,
        extra=fields | {"duration_ms": duration_ms},
    )
    stage_span(
        f"batch {stage.value}",
        duration_s=seconds,
        attributes={f"nightshift.{key}": value for key, value in fields.items() if value is not None},
    )
