"""What a model answered for one request, provider-neutral: the answer, or the provider's error,
and what became of a request of a batch. The providers make them (``providers/``); a batch item
keeps them in its ``StoredResult`` until its step is applied."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nightshift.domain.fast_init import fast_init
from nightshift.domain.messages import ToolCall
from nightshift.domain.usage import Usage
from nightshift.domain.versions import Upgrade, upgrade_state
from nightshift.errors import is_retryable


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelError:
    """An error the provider returned for one request: its kind (``rate_limit_error``...) and text."""

    type: str
    message: str

    @property
    def retryable(self) -> bool:
        """Whether sending the same request again later may succeed."""
        return is_retryable(self.type)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """What the model answered, provider-neutral.

    ``tool_calls`` are the turn's tool calls in the model's order, their ``arguments`` the JSON
    text without ``inner_thoughts`` and ``request_heartbeat``: ``reasoning`` holds the calls'
    inner thoughts (each different one once, in order) and ``request_heartbeat`` is true when any
    call asked for it. When the model wrote arguments that are not a JSON object, they are kept
    verbatim so the runtime can report a tool error. ``text`` is visible text the model wrote (the
    answer, when there is no tool call). ``raw`` is the provider's message as JSON.
    """

    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    request_heartbeat: bool = False
    text: str | None = None
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    model: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def tool_call(self) -> ToolCall | None:
        """The first tool call, if any."""
        return self.tool_calls[0] if self.tool_calls else None


class OutcomeStatus(StrEnum):
    """What became of one request of a batch. Every value is final."""

    SUCCEEDED = "succeeded"  # the model answered; ``response`` holds it
    ERRORED = "errored"  # the provider refused or failed this request; ``error`` says why
    CANCELED = "canceled"  # the batch was cancelled before this request was processed
    EXPIRED = "expired"  # the batch expired before this request was processed


class Route(StrEnum):
    """Which way a batch item's request was answered, which sets its price."""

    BATCH = "batch"  # in its provider batch: the batch price
    NORMAL = "normal"  # taken over for a deadline, through the normal API: the normal price
    FLEX = "flex"  # taken over through a tier billed at the batch price (OpenAI's ``flex``)


RESULT_VERSION = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResult:
    """What became of one batch item's request, persisted on the item as versioned JSON until its
    step is applied: the outcome's status, the model's answer or the provider's error, and the
    provider's result line as it came (``raw``, kept for a person looking into a failure).

    A request that got no answer at all (it could not be built, the batch was given up) is
    stored as ``errored``, with the provider's error when there was one. ``route``: how it was
    answered (taken over for a deadline, or in its batch: what results stored before the take-over
    existed were).
    """

    status: OutcomeStatus
    response: ModelResponse | None = None
    error: ModelError | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    route: Route = Route.BATCH

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": RESULT_VERSION,
            "status": self.status.value,
            "response": _response_json(self.response) if self.response else None,
            "error": {"type": self.error.type, "message": self.error.message} if self.error else None,
            "raw": dict(self.raw),
            "route": self.route.value,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredResult:
        """Read a stored result, of this version or an older one (upgraded on the way); results
        stored before they carried a ``schema_version`` are version 1.

        Raises:
            ValueError: A result of a newer version (written by a newer nightshift).
        """
        data = upgrade_state({"schema_version": 1, **data}, RESULT_UPGRADES, current=RESULT_VERSION)
        response, error = data["response"], data["error"]
        return cls(
            status=OutcomeStatus(data["status"]),
            response=_response_from_json(response) if response else None,
            error=ModelError(type=error["type"], message=error["message"]) if error else None,
            raw=data.get("raw") or {},
            route=Route(data.get("route", Route.BATCH)),
        )


def _response_json(response: ModelResponse) -> dict[str, Any]:
    return {
        "tool_calls": [c.to_json() for c in response.tool_calls],
        "reasoning": response.reasoning,
        "request_heartbeat": response.request_heartbeat,
        "text": response.text,
        "usage": response.usage.to_json(),
        "stop_reason": response.stop_reason,
        "model": response.model,
    }


def _response_from_json(data: dict[str, Any]) -> ModelResponse:
    return ModelResponse(
        tool_calls=tuple(ToolCall.from_json(c) for c in data["tool_calls"]),
        reasoning=data.get("reasoning"),
        request_heartbeat=bool(data.get("request_heartbeat")),
        text=data.get("text"),
        usage=Usage.from_json(data.get("usage", {})),
        stop_reason=data.get("stop_reason"),
        model=data.get("model"),
    )


def _one_call_to_many(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 to 2: an answer stored before turns held several calls has one ``tool_call``
    (or null) where it now has the list ``tool_calls``."""
    response = data.get("response")
    if not response or "tool_calls" in response:
        return data
    calls = [call for call in [response.get("tool_call")] if call]
    return {**data, "response": {**response, "tool_calls": calls}}


# How a stored result of each old version becomes the next one (see ``StepState``'s upgrades).
RESULT_UPGRADES: dict[int, Upgrade] = {1: _one_call_to_many}
