"""Batch runs, provider batches and batch items: the state of stepping many agents at once.

State machines::

    BatchRun:       created -> running -> completed | failed | cancelled
    ProviderBatch:  created -> running -> ended -> applied            (cancel: -> cancelling -> ended)
    BatchItem.request_status:  created -> running -> completed | failed | cancelled | expired
    BatchItem.step_status:     paused -> completed

A provider batch is one batch submitted to one provider for one step of some agents of a run.
A batch item is one agent inside one provider batch.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Status of a batch run (what the user created with one POST)."""

    CREATED = "created"  # persisted, first step not yet submitted -> running | failed
    RUNNING = "running"  # some provider batch of the run is open -> completed | failed | cancelled
    COMPLETED = "completed"  # every agent stopped and at least one succeeded (terminal)
    FAILED = "failed"  # every agent failed, or the run could not be submitted (terminal)
    CANCELLED = "cancelled"  # the user cancelled it; no further steps (terminal)


class ProviderBatchStatus(StrEnum):
    """Our view of one provider batch."""

    CREATED = "created"  # persisted, not yet accepted by the provider -> running
    RUNNING = "running"  # accepted; polled until it ends -> ended | cancelling
    CANCELLING = "cancelling"  # cancel sent to the provider; polled until it ends -> ended
    ENDED = "ended"  # the provider finished; every item's result is stored -> applied
    APPLIED = "applied"  # the results were applied to the agents (terminal)


class RequestStatus(StrEnum):
    """Status of one agent's request inside a provider batch."""

    CREATED = "created"  # persisted before submission -> running
    RUNNING = "running"  # submitted, no result yet -> completed | failed | cancelled | expired
    COMPLETED = "completed"  # the provider returned a message (terminal)
    FAILED = "failed"  # the provider returned an error for this request (terminal)
    CANCELLED = "cancelled"  # the batch was cancelled before this request ran (terminal)
    EXPIRED = "expired"  # the batch expired before this request ran (terminal)


class StepStatus(StrEnum):
    """Whether the agent's step for this item has been applied."""

    PAUSED = "paused"  # waiting for the provider's result -> completed
    COMPLETED = "completed"  # the result was applied (messages written, tools run) (terminal)
