"""The one log line of each stage a provider batch goes through, with its fields, its duration in
the metrics and, with tracing on, its span.

Each line says which run, step and provider batch, how many agents and how long the stage took,
in its message and as fields (``extra=``) that the JSON log format writes as they are. Nothing
of the agents' messages, tool arguments or secrets is in it. The same duration goes into the
``nightshift_stage_duration_seconds`` histogram, so the logs and the metrics agree.
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum

from nightshift.domain.batches import ProviderBatch
from nightshift.metrics import Metrics
from nightshift.tracing import stage_span

log = logging.getLogger(__name__)


class Stage(StrEnum):
    """A stage of a provider batch that logs a line when it is done."""

    SUBMIT = "submit"  # sent to its provider (created -> running)
    POLL = "poll"  # ended at the provider, every result stored (running -> ended)
    APPLY = "apply"  # results applied to the agents, the next step written (ended -> applied)
    CANCEL = "cancel"  # cancelled at the provider for a cancelled run (cancelling -> cancelled)


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
    ``started`` is when it began (``time.monotonic()``)."""
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
