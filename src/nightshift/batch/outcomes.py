"""A provider's per-request outcome, stored on its batch item as JSON and read back at resume."""

from __future__ import annotations

from typing import Any

from nightshift.domain.batches import RequestStatus
from nightshift.domain.messages import ToolCall
from nightshift.providers.base import BatchOutcome, ModelError, ModelResponse, OutcomeStatus, Usage

REQUEST_STATUS = {
    OutcomeStatus.SUCCEEDED: RequestStatus.COMPLETED,
    OutcomeStatus.ERRORED: RequestStatus.FAILED,
    OutcomeStatus.CANCELED: RequestStatus.CANCELLED,
    OutcomeStatus.EXPIRED: RequestStatus.EXPIRED,
}


def usage_json(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def response_json(response: ModelResponse) -> dict[str, Any]:
    call = response.tool_call
    return {
        "tool_call": {"id": call.id, "name": call.name, "arguments": call.arguments} if call else None,
        "reasoning": response.reasoning,
        "request_heartbeat": response.request_heartbeat,
        "text": response.text,
        "usage": usage_json(response.usage),
        "stop_reason": response.stop_reason,
        "model": response.model,
    }


def response_from_json(data: dict[str, Any]) -> ModelResponse:
    call = data.get("tool_call")
    return ModelResponse(
        tool_call=ToolCall(id=call["id"], name=call["name"], arguments=call["arguments"]) if call else None,
        reasoning=data.get("reasoning"),
        request_heartbeat=bool(data.get("request_heartbeat")),
        text=data.get("text"),
        usage=Usage(**data.get("usage", {})),
        stop_reason=data.get("stop_reason"),
        model=data.get("model"),
    )


def outcome_row(item_id: str, outcome: BatchOutcome) -> dict[str, Any]:
    """The values ``store.batches.store_results`` writes for one item."""
    error = outcome.error
    result: dict[str, Any] = {
        "status": outcome.status.value,
        "response": response_json(outcome.response) if outcome.response else None,
        "error": {"type": error.type, "message": error.message} if error else None,
        "raw": dict(outcome.raw),
    }
    if outcome.status is OutcomeStatus.SUCCEEDED and outcome.response is not None:
        usage: dict[str, int] | None = usage_json(outcome.response.usage)
    else:
        usage = None
    text = f"{error.type}: {error.message}" if error else None
    if outcome.status in (OutcomeStatus.CANCELED, OutcomeStatus.EXPIRED):
        text = f"the provider batch {outcome.status.value} before this request ran"
    return {
        "item_id": item_id,
        "request_status": REQUEST_STATUS[outcome.status].value,
        "result": result,
        "usage": usage,
        "error": text,
    }


def failed_row(item_id: str, reason: str, error: ModelError | None = None) -> dict[str, Any]:
    """The values ``store_results`` writes for a request that got no answer (``reason`` says why)."""
    return {
        "item_id": item_id,
        "request_status": RequestStatus.FAILED.value,
        "result": {
            "status": "errored",
            "response": None,
            "error": {"type": error.type, "message": error.message} if error else None,
            "raw": {},
        },
        "usage": None,
        "error": reason,
    }


def stored_error(result: dict[str, Any] | None) -> ModelError | None:
    """The provider error stored with an item's result, if any."""
    error = (result or {}).get("error")
    return ModelError(type=error["type"], message=error["message"]) if error else None
