"""Bodies of the batch-run routes and of sending messages, in Letta's field names, and the run's view."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, HttpUrl, model_validator

from nightshift.api.approval_schemas import (
    ApprovalBody,
    ClientToolBody,
    ToolReturnsBody,
    answer_of,
    message_type,
)
from nightshift.api.input import Body, variant
from nightshift.api.letta_options import refuse_batch_options
from nightshift.domain.approvals import Answer
from nightshift.domain.batches import Costs, ItemOutcome, ProviderBatch, ProviderBatchStatus, refuse_repeated_agents
from nightshift.domain.limits import MAX_LIST_ITEMS
from nightshift.domain.messages import IMAGE_MEDIA_TYPES, Image, UserInput
from nightshift.domain.usage import Usage
from nightshift.errors import InvalidInput
from nightshift.services.batch_runs import AgentInBatchRun, BatchRunView


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"] = "text"
    text: str


class ImageSource(BaseModel):
    """Letta's image source: ``base64`` (``media_type`` and ``data``) or ``url``."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["base64", "url", "letta"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> ImageSource:
        if self.type == "letta":
            raise ValueError("an image by Letta file id is not supported: send its bytes (base64) or a URL")
        if self.type == "url":
            if not self.url or not self.url.startswith(("http://", "https://")):
                raise ValueError("an image url must be an http(s) URL")
            return self
        if self.media_type not in IMAGE_MEDIA_TYPES:
            raise ValueError(f"media_type must be one of {', '.join(IMAGE_MEDIA_TYPES)}")
        try:
            base64.b64decode(self.data or "", validate=True)
        except binascii.Error:
            raise ValueError("data is not valid base64") from None
        if not self.data:
            raise ValueError("data must hold the image's bytes, base64-encoded")
        return self

    def to_image(self) -> Image:
        if self.type == "url":
            return Image(url=self.url)
        return Image(media_type=self.media_type, data=self.data)


class ImagePart(BaseModel):
    """Letta's ImageContent: an image the model sees with the message's text."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["image"]
    source: ImageSource


# Letta's message fields naming what nightshift does not have (see InputMessage).
NOT_OURS: Final = ("group_id", "sender_id", "batch_item_id")


class InputMessage(BaseModel):
    """A message to the agent. System messages reach the model as user turns marked [system].

    ``otid`` (the sender's own id for it) and ``name`` (the participant's) are kept on the stored
    message and shown with it. Letta's ``group_id``, ``sender_id`` and ``batch_item_id`` name a
    multi-agent group, an identity or a batch item that nightshift does not have: refused when set.
    """

    model_config = ConfigDict(extra="ignore")
    role: Literal["user", "system"] = "user"
    content: str | list[TextPart | ImagePart]
    otid: str | None = Field(default=None, max_length=255)
    name: str | None = Field(default=None, max_length=255)

    @model_validator(mode="before")
    @classmethod
    def _not_ours(cls, data: Any) -> Any:
        # On the parsed message rather than as fields: each field costs every message of a large
        # batch run its validation and storage check, and these are seldom set.
        if isinstance(data, dict):
            for name in NOT_OURS:
                if data.get(name) is not None:
                    raise ValueError(
                        f"{name} is not supported: nightshift has no multi-agent groups, identities or"
                        " client-made batch items; leave it unset"
                    )
        return data

    def as_text(self) -> str:
        text = (
            self.content
            if isinstance(self.content, str)
            else "\n".join(p.text for p in self.content if isinstance(p, TextPart))
        )
        return f"[system] {text}" if self.role == "system" else text

    def images(self) -> tuple[Image, ...]:
        if isinstance(self.content, str):
            return ()
        return tuple(p.source.to_image() for p in self.content if isinstance(p, ImagePart))

    def as_input(self) -> UserInput:
        """The message's text with its images, the sender's ``otid`` for it and its ``name``."""
        return UserInput(text=self.as_text(), images=self.images(), otid=self.otid, name=self.name)


def shorthand_input(shorthand: str | list[TextPart]) -> UserInput:
    """Letta's ``input`` shorthand: a text, or text parts joined by lines."""
    return UserInput(text=shorthand if isinstance(shorthand, str) else "\n".join(p.text for p in shorthand))


def input_turns(messages: list[InputMessage] | None, shorthand: str | list[TextPart] | None) -> tuple[UserInput, ...]:
    """Letta's ``messages`` and its ``input`` shorthand, in that order."""
    found = [m.as_input() for m in messages or ()]
    if shorthand is not None:
        found.append(shorthand_input(shorthand))
    return tuple(found)


# A message of a run's request: one to the agent, or the answer to the approval request it awaits.
RequestMessage = Annotated[
    Annotated[InputMessage, variant("message")]
    | Annotated[ApprovalBody, variant("approval")]
    | Annotated[ToolReturnsBody, variant("tool_return")],
    Discriminator(message_type),
]


class BatchRequestBody(BaseModel):
    """One agent of a run: its id and its messages (or Letta's ``input`` shorthand), or its answer
    to the approval request it awaits; and the client-side tools offered for the run.

    Letta's send options that a batch run does not carry out are refused when set, as the body
    arrives (``BatchCreate``).
    """

    model_config = ConfigDict(extra="ignore")
    agent_id: str = Field(min_length=1)
    messages: list[RequestMessage] | None = None
    input: str | list[TextPart] | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    client_tools: list[ClientToolBody] | None = Field(default=None, max_length=MAX_LIST_ITEMS)

    def texts(self) -> tuple[UserInput, ...]:
        """The messages, in order."""
        return input_turns([m for m in self.messages or () if isinstance(m, InputMessage)], self.input)

    def answer(self) -> Answer | None:
        """The answer to the agent's approval request, if the request is one (then alone).

        Raises:
            InvalidInput: more than one answer, or an answer with messages.
        """
        answer = answer_of([m for m in self.messages or () if isinstance(m, ApprovalBody | ToolReturnsBody)])
        if answer is not None and self.texts():
            raise InvalidInput(
                f"the request of agent {self.agent_id} answers its approval request: send that alone, "
                "without other messages",
                field="requests",
            )
        return answer


class BatchCreate(Body):
    requests: list[BatchRequestBody]
    callback_url: HttpUrl | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _each_agent_once(cls, data: Any) -> Any:
        """Refuse an agent named twice before the requests are read one by one.

        Validating, checking and copying tens of thousands of requests (and passing them to
        ``queue_batch_run``, which would refuse them) is most of the work such a body costs, while a
        repeated agent id is found in the parsed JSON in one pass over the ids. The error is the
        one ``queue_batch_run`` raises: ``InvalidInput``, which pydantic lets through (it wraps
        only ``ValueError``), answered as a 422 that names the agents. Anything malformed is left
        to the validation that follows.
        """
        requests = data.get("requests") if isinstance(data, dict) else None
        if isinstance(requests, list):
            refuse_repeated_agents(
                r["agent_id"] for r in requests if isinstance(r, dict) and isinstance(r.get("agent_id"), str)
            )
            refuse_batch_options(requests)
        return data


def _awaiting(count: int) -> dict[str, int]:
    return {"awaiting_approval": count} if count else {}


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

    @classmethod
    def of(cls, view: BatchRunView) -> BatchRunPublic:
        run, progress = view.run, view.progress
        return cls(
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
            progress={
                "step": progress.step,
                "agents": {
                    "running": progress.running,
                    "finished": progress.count(ItemOutcome.FINISHED),
                    "failed": progress.count(ItemOutcome.FAILED),
                    "cancelled": progress.count(ItemOutcome.CANCELLED),
                    # Stopped on a call that waits for the client (answer with an approval);
                    # shown when there are any, so that a run without approvals looks as it did.
                    **_awaiting(progress.count(ItemOutcome.NEEDS_APPROVAL)),
                },
                # Steps that summarized an agent's oldest messages before its next request.
                "summaries": progress.count(ItemOutcome.SUMMARIZED),
                "failures": [
                    {
                        "agent_id": f.agent_id,
                        "agent_name": f.agent_name,
                        "agent_deleted": f.agent_deleted,
                        "step_number": f.step_number,
                        "request_status": f.request_status.value,
                        "error": f.error,
                    }
                    for f in view.failures
                ],
                "usage": usage_json(progress.usage),
                **costs_json(progress.cost),
                # The newest problem with the provider (it cannot be reached, it refused the batch):
                # known from the first failed attempt, long before any agent fails of it.
                "last_error": last_error_json(view.batches),
                "provider_batches": [
                    {
                        "id": b.id,
                        "provider": b.provider,
                        "provider_batch_id": b.provider_batch_id,
                        "step_number": b.step_number,
                        "status": b.status.value,
                        "provider_status": b.provider_status,
                        "request_counts": b.request_counts,
                        "usage": usage_json(progress.batch_usage.get(b.id)),
                        "cost_usd": round(progress.batch_cost_usd.get(b.id, 0.0), 6),
                        "error": b.error,
                        "duplicates": list(b.duplicates),
                        "created_at": b.created_at,
                        "ended_at": b.ended_at,
                        # Its last change of status: when it was applied or cancelled, once it is.
                        "updated_at": b.updated_at,
                    }
                    for b in view.batches
                ],
            },
        )


# What a provider batch's worker was doing when it failed, by the status it stayed in.
_STAGES: Final = {
    ProviderBatchStatus.CREATED: "submit",
    ProviderBatchStatus.RUNNING: "poll",
    ProviderBatchStatus.ENDED: "apply",
    ProviderBatchStatus.CANCELLING: "cancel",
}


def last_error_json(batches: Sequence[ProviderBatch]) -> dict[str, Any] | None:
    """The run's newest provider problem: of its provider batches with an error, an open one
    (whose stage is retried) before a closed one, then the latest step's. None when there is none.

    ``retrying`` says whether it will be tried again, at ``retry_at``; ``attempts`` counts the
    failures in a row of that stage (the batch is given up past a limit, its agents failed).
    """
    failed = [b for b in batches if b.error]
    if not failed:
        return None
    batch = max(failed, key=lambda b: (b.status in _STAGES, b.step_number, b.updated_at))
    retrying = batch.status in _STAGES and batch.next_poll_at is not None
    return {
        "provider": batch.provider,
        "provider_batch_id": batch.id,
        "step_number": batch.step_number,
        "stage": _STAGES.get(batch.status),
        "error": batch.error,
        "attempts": batch.failures,
        "retrying": retrying,
        "retry_at": batch.next_poll_at if retrying else None,
    }


def agent_in_run_json(agent: AgentInBatchRun) -> dict[str, Any]:
    return {
        "agent_id": agent.agent_id,
        "agent_name": agent.agent_name,
        "agent_deleted": agent.agent_deleted,
        "state": agent.state,
        "steps": agent.steps,
        "step_number": agent.step_number,
        "usage": usage_json(agent.usage),
        **costs_json(agent.cost),
        "error": agent.error,
    }


def usage_json(usage: Usage | None) -> dict[str, int]:
    """Tokens used, by kind (empty when nothing answered yet)."""
    return usage.to_json() if usage is not None else {}


def costs_json(cost: Costs) -> dict[str, float]:
    """A run's or an agent's costs in USD, each rounded to a millionth of a dollar.

    ``cost_without_batch_usd`` is what the same tokens cost through the normal API (so the batch
    saved the difference); ``cache_savings_usd`` what the prompt cache saved: the cached tokens
    at the plain input price minus what reading and writing them cost, negative when the writes
    were not read back enough to pay for themselves.
    """
    return {
        "cost_usd": round(cost.usd, 6),
        "cost_without_batch_usd": round(cost.without_batch_usd, 6),
        "batch_savings_usd": round(cost.without_batch_usd - cost.usd, 6),
        "cache_savings_usd": round(cost.cache_savings_usd, 6),
    }
