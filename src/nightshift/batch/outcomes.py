"""A provider's per-request outcome, stored on its batch item as JSON and read back at resume."""

from __future__ import annotations

from typing import Any

from nightshift.domain.batches import ItemResult, RequestStatus
from nightshift.domain.messages import ToolCall
from nightshift.domain.usage import Usage
from nightshift.providers.base import BatchOutcome, ModelError, ModelResponse, OutcomeStatus

REQUEST_STATUS = {
    OutcomeStatus.SUCCEEDED: RequestStatus.COMPLETED,
    OutcomeStatus.ERRORED: RequestStatus.FAILED,
    OutcomeStatus.CANCELED: RequestStatus.CANCELLED,
    OutcomeStatus.EXPIRED: RequestStatus.EXPIRED,
}


def response_json(response: ModelResponse) -> dict[str, Any]:
    return {
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls],
        "reasoning": response.reasoning,
        "request_heartbeat": response.request_heartbeat,
        "text": response.text,
        "usage": response.usage.to_json(),
        "stop_reason": response.stop_reason,
        "model": response.model,
    }


def response_from_json(data: dict[str, Any]) -> ModelResponse:
    # Results stored before turns held several calls have one "tool_call" (or null).
    calls = data["tool_calls"] if "tool_calls" in data else [c for c in [data.get("tool_call")] if c]
    return ModelResponse(
        tool_calls=tuple(ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in calls),
        reasoning=data.get("reasoning"),
        request_heartbeat=bool(data.get("request_heartbeat")),
        text=data.get("text"),
        usage=Usage.from_json(data.get("usage", {})),
        stop_reason=data.get("stop_reason"),
        model=data.get("model"),
    )


def outcome_result(item_id: str, outcome: BatchOutcome) -> ItemResult:
    """What is stored for one item the provider answered (or errored, cancelled, expired)."""
    error = outcome.error
    result: dict[str, Any] = {
        "status": outcome.status.value,
        "response": response_json(outcome.response) if outcome.response else None,
        "error": {"type": error.type, "message": error.message} if error else None,
        "raw": dict(outcome.raw),
    }
    answered = outcome.status is OutcomeStatus.SUCCEEDED and outcome.response is not None
    text = f"{error.type}: {error.message}" if error else None
    if outcome.status in (OutcomeStatus.CANCELED, OutcomeStatus.EXPIRED):
        text = f"the provider batch {outcome.status.value} before this request ran"
    return ItemResult(
        item_id=item_id,
        request_status=REQUEST_STATUS[outcome.status],
        result=result,
        usage=outcome.response.usage if answered and outcome.response else None,
        error=text,
    )


def failed_result(item_id: str, reason: str, error: ModelError | None = None) -> ItemResult:
    """What is stored for a request that got no answer (``reason`` says why)."""
    return ItemResult(
        item_id=item_id,
        request_status=RequestStatus.FAILED,
        result={
            "status": "errored",
            "response": None,
            "error": {"type": error.type, "message": error.message} if error else None,
            "raw": {},
        },
        error=reason,
    )


def stored_error(result: dict[str, Any] | None) -> ModelError | None:
    """The provider error stored with an item's result, if any."""
    error = (result or {}).get("error")
    return ModelError(type=error["type"], message=error["message"]) if error else None
