"""A provider's per-request outcome as its batch item stores it (``StoredResult``), and why it failed."""

from __future__ import annotations

from nightshift.domain.answers import StoredResult
from nightshift.domain.batches import ItemResult, RequestStatus
from nightshift.providers.base import BatchOutcome, ModelError, OutcomeStatus

REQUEST_STATUS = {
    OutcomeStatus.SUCCEEDED: RequestStatus.COMPLETED,
    OutcomeStatus.ERRORED: RequestStatus.FAILED,
    OutcomeStatus.CANCELED: RequestStatus.CANCELLED,
    OutcomeStatus.EXPIRED: RequestStatus.EXPIRED,
}


def outcome_result(item_id: str, outcome: BatchOutcome) -> ItemResult:
    """What is stored for one item the provider answered (or errored, cancelled, expired)."""
    error = outcome.error
    answered = outcome.status is OutcomeStatus.SUCCEEDED and outcome.response is not None
    text = f"{error.type}: {error.message}" if error else None
    if outcome.status in (OutcomeStatus.CANCELED, OutcomeStatus.EXPIRED):
        text = f"the provider batch {outcome.status.value} before this request ran"
    return ItemResult(
        item_id=item_id,
        request_status=REQUEST_STATUS[outcome.status],
        result=StoredResult(status=outcome.status, response=outcome.response, error=error, raw=outcome.raw),
        usage=outcome.response.usage if answered and outcome.response else None,
        error=text,
    )


def failed_result(item_id: str, reason: str, error: ModelError | None = None) -> ItemResult:
    """What is stored for a request that got no answer (``reason`` says why)."""
    return ItemResult(
        item_id=item_id,
        request_status=RequestStatus.FAILED,
        result=StoredResult(status=OutcomeStatus.ERRORED, error=error),
        error=reason,
    )
