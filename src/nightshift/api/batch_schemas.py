"""Bodies of the batch-run routes and of sending messages, in Letta's field names (the answers' shapes are
``batch_views``)."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Discriminator, Field, HttpUrl, model_validator

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
from nightshift.domain.batches import refuse_repeated_agents
from nightshift.domain.limits import MAX_LIST_ITEMS
from nightshift.domain.messages import IMAGE_MEDIA_TYPES, Image, UserInput
from nightshift.errors import InvalidInput


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


# The furthest deadline taken: a batch expires at its provider within a day, so a longer one
# never decides anything, and a far larger number overflows a date.
MAX_FINISH_WITHIN_SECONDS: Final = 365 * 24 * 3600


class BatchCreate(Body):
    requests: list[BatchRequestBody]
    callback_url: HttpUrl | None = None
    metadata: dict[str, Any] | None = None
    deadline: AwareDatetime | None = Field(
        default=None,
        description="nightshift: when the run is to be done by (with its time zone); the requests a "
        "step's batch has not answered in time go through the normal API",
    )
    finish_within_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_FINISH_WITHIN_SECONDS,
        description="nightshift: the deadline, in seconds from now (not with deadline; a year at most)",
    )

    @model_validator(mode="after")
    def _one_deadline(self) -> BatchCreate:
        if self.deadline is not None and self.finish_within_seconds is not None:
            raise InvalidInput("give deadline or finish_within_seconds, not both", field="deadline")
        return self

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
