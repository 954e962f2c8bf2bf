"""Sending messages to one agent, in the request or in the background (``/async``), and cancelling its runs."""

from __future__ import annotations

from typing import Annotated, Any, Self

from fastapi import Depends, Query
from fastapi.responses import StreamingResponse
from pydantic import Discriminator, Field, HttpUrl, field_validator, model_validator

from nightshift.api.approval_schemas import (
    ApprovalBody,
    ClientToolBody,
    ToolReturnsBody,
    answer_of,
    client_tools_of,
    message_type,
)
from nightshift.api.batch_schemas import InputMessage, TextPart, shorthand_input
from nightshift.api.deps import Now, Org, State
from nightshift.api.errors import PROVIDER_ERROR_RESPONSES
from nightshift.api.input import Body, Name, Text, variant
from nightshift.api.letta_messages import (
    MESSAGE_KWARG,
    SEND_MESSAGE,
    LettaMessageType,
    LettaView,
    to_letta_messages,
    usage_statistics,
)
from nightshift.api.letta_options import SendRefusals
from nightshift.api.letta_stream import STREAMED, StreamOptions, streamed_run
from nightshift.api.routers import secured
from nightshift.api.run_schemas import run_json
from nightshift.api.run_stream import background_stream, recorder
from nightshift.api.schemas import llm_config_from
from nightshift.domain.limits import MAX_LIST_ITEMS, MAX_MESSAGE_CHARS, MAX_STEPS
from nightshift.domain.messages import Role, UserInput
from nightshift.errors import InvalidInput
from nightshift.services import agent_runs
from nightshift.services.agent_runs import Send, letta_stop_reason

router = secured("agents", responses=PROVIDER_ERROR_RESPONSES)


class OwnMessage(InputMessage):
    """A message to the agent in a send: as in a batch request, its ``otid`` and ``name`` are kept."""


# A message of a send: one to the agent, or the client's answer to the approval request it awaits.
SentMessage = Annotated[
    Annotated[OwnMessage, variant("message")]
    | Annotated[ApprovalBody, variant("approval")]
    | Annotated[ToolReturnsBody, variant("tool_return")],
    Discriminator(message_type),
]


class SendMessages(StreamOptions, SendRefusals):
    """Letta's LettaRequest: ``messages`` or the ``input`` shorthand, a step limit, how to show the
    messages, whether to stream them, and the model and system prompt of this send only.

    The options nightshift does not carry out are refused when set (``SendRefusals``).
    """

    messages: list[SentMessage] | None = Field(default=None, max_length=MAX_LIST_ITEMS)
    input: str | list[TextPart] | None = None
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    use_assistant_message: bool = True
    assistant_message_tool_name: str = Field(default=SEND_MESSAGE, min_length=1, max_length=255)
    assistant_message_tool_kwarg: str = Field(default=MESSAGE_KWARG, min_length=1, max_length=255)
    include_return_message_types: list[LettaMessageType] | None = None
    override_model: Name | None = Field(
        default=None, description="provider/model-name for this send's steps instead of the agent's model"
    )
    override_system: Text | None = Field(
        default=None, description="The system prompt of this send's model calls instead of the agent's"
    )

    @field_validator("override_model")
    @classmethod
    def _known_model(cls, value: str | None) -> str | None:
        """Checked as an agent's model is: ``provider/model-name`` of a registered provider."""
        if value is not None:
            try:
                llm_config_from(value, None, models=None)
            except InvalidInput as exc:
                raise ValueError(exc.message) from None
        return value

    client_tools: list[ClientToolBody] | None = Field(default=None, max_length=MAX_LIST_ITEMS)

    @model_validator(mode="after")
    def _one_way_in(self) -> Self:
        if self.messages is not None and self.input is not None:
            raise ValueError("give either 'messages' or 'input', not both")
        return self

    def inputs(self) -> list[UserInput]:
        """The input messages, checked against the size a request may carry."""
        found = [m.as_input() for m in self.messages or () if isinstance(m, OwnMessage)]
        if self.input is not None:
            found.append(shorthand_input(self.input))
        size = sum(len(i.text) for i in found)
        if size > MAX_MESSAGE_CHARS:
            raise InvalidInput(
                f"the messages hold {size} characters; one request takes at most {MAX_MESSAGE_CHARS}",
                field="messages",
            )
        return found

    def send(self, agent_id: str, max_steps: int, callback_url: str | None = None) -> Send:
        """The send this body asks for: its messages, or its answer to an approval request."""
        answers = [m for m in self.messages or () if isinstance(m, ApprovalBody | ToolReturnsBody)]
        return Send(
            agent_id=agent_id,
            inputs=self.inputs(),
            max_steps=self.max_steps or max_steps,
            request_config=self.request_config(),
            callback_url=callback_url,
            answer=answer_of(answers),
            client_tools=client_tools_of(self.client_tools),
            override_model=self.override_model,
            override_system=self.override_system,
        )

    def request_config(self) -> dict[str, Any]:
        """Letta's request_config of the run: how its messages are shown."""
        return {
            "use_assistant_message": self.use_assistant_message,
            "assistant_message_tool_name": self.assistant_message_tool_name,
            "assistant_message_tool_kwarg": self.assistant_message_tool_kwarg,
            "include_return_message_types": self.include_return_message_types,
        }


class SendLater(SendMessages):
    """Letta's LettaAsyncRequest: a send, and the URL to POST when its run ends."""

    callback_url: HttpUrl | None = None


class CancelRuns(Body):
    run_ids: list[str] | None = Field(default=None, max_length=MAX_LIST_ITEMS)


def view_of(config: dict[str, Any]) -> LettaView:
    """The view a run's request_config asks for."""
    types = config.get("include_return_message_types")
    return LettaView(
        use_assistant_message=config.get("use_assistant_message", True),
        assistant_tool=config.get("assistant_message_tool_name") or SEND_MESSAGE,
        assistant_kwarg=config.get("assistant_message_tool_kwarg") or MESSAGE_KWARG,
        types=frozenset(types) if types is not None else None,
    )


async def shown_view(
    use_assistant_message: Annotated[
        bool, Query(description="Show a call of the assistant tool as an assistant_message")
    ] = True,
    assistant_message_tool_name: Annotated[str, Query(min_length=1, max_length=255)] = SEND_MESSAGE,
    assistant_message_tool_kwarg: Annotated[str, Query(min_length=1, max_length=255)] = MESSAGE_KWARG,
    include_return_message_types: Annotated[
        list[LettaMessageType] | None, Query(description="Only these message types (default: all)")
    ] = None,
) -> LettaView:
    """How a listing of messages asks to show them: Letta's query parameters of the same names
    (an agent's messages, a group's)."""
    # async: FastAPI would run a plain function in its thread pool (a thread hop per request).
    return view_of(
        {
            "use_assistant_message": use_assistant_message,
            "assistant_message_tool_name": assistant_message_tool_name,
            "assistant_message_tool_kwarg": assistant_message_tool_kwarg,
            "include_return_message_types": include_return_message_types,
        }
    )


ShownView = Annotated[LettaView, Depends(shown_view)]


async def listed_view(
    view: ShownView,
    group_id: Annotated[
        str | None, Query(description="Refused: list a group's messages with GET /v1/groups/{group_id}/messages")
    ] = None,
    conversation_id: Annotated[str | None, Query(description="Refused: nightshift has no conversations")] = None,
) -> LettaView:
    """How a listing of an agent's messages asks to show them (``shown_view``).

    ``group_id`` and ``conversation_id`` would narrow the listing to a group's or a conversation's
    messages; nightshift lists a group's messages apart (``GET /v1/groups/{group_id}/messages``) and
    has no conversations, so they are refused rather than ignored.
    """
    for name, value in (("group_id", group_id), ("conversation_id", conversation_id)):
        if value is not None:
            raise InvalidInput(
                f"{name} is not supported: an agent has one message history (a group's messages are"
                " listed by GET /v1/groups/{group_id}/messages); leave it unset",
                field=f"query.{name}",
            )
    return view


ListedView = Annotated[LettaView, Depends(listed_view)]


@router.post("/v1/agents/{agent_id}/messages", response_model=None, responses=STREAMED)
async def send_messages(
    agent_id: str, body: SendMessages, state: State, org: Org
) -> dict[str, Any] | StreamingResponse:
    """Send messages to an agent and step it through the provider's normal API until it stops.

    Returns Letta's response: the messages the run wrote after the input (reasoning, tool calls,
    tool returns, assistant messages; not the input itself nor the heartbeats between steps), each
    with its run and step, then the stop reason and the token usage. A 409 while the agent is in
    an open step of a batch run or of another send. With ``streaming: true``, the same run as
    server-sent events (``/messages/stream``).

    A call of a tool that needs approval, or of one of the request's ``client_tools``, stops the
    agent (stop reason ``requires_approval``, an ``approval_request_message``); the next send is
    the answer, a message of type ``approval`` (or ``tool_return``), and anything else is a 409.
    """
    send = body.send(agent_id, state.settings.default_max_steps)
    view = view_of(send.request_config)
    if body.streaming and body.background:
        return await background_stream(state, org, send, options=body, view=view)
    if body.streaming:
        return await streamed_run(state, org, send, options=body, view=view)
    _, result = await agent_runs.send_now(state.stepping, org, send)
    new = [m for m in result.messages if m.role is not Role.USER]
    return {
        "messages": [part for message in new for part in to_letta_messages(message, view)],
        "stop_reason": {"message_type": "stop_reason", "stop_reason": letta_stop_reason(result)},
        "usage": usage_statistics(result),
    }


@router.post("/v1/agents/{agent_id}/messages/async")
async def send_messages_later(agent_id: str, body: SendLater, state: State, org: Org) -> dict[str, Any]:
    """Send messages to an agent and step it in the background; returns the run, still ``created``.

    The run is stepped by this server process; follow it with ``GET /v1/runs/{run_id}``, or read
    its stream with ``POST /v1/runs/{run_id}/stream``. Its ``callback_url``, if any, gets a POST
    when it ends.
    """
    callback_url = str(body.callback_url) if body.callback_url is not None else None
    send = body.send(agent_id, state.settings.default_max_steps, callback_url)
    view = view_of(send.request_config)
    run = await agent_runs.send_later(state.background, org, send, recorder(state, tokens=False, view=view))
    return run_json(run)


@router.post("/v1/agents/{agent_id}/messages/cancel")
async def cancel_runs(
    agent_id: str, state: State, org: Org, now: Now, body: CancelRuns | None = None
) -> dict[str, Any]:
    """Cancel the agent's open runs (those of ``run_ids``, or all), its part of a batch run included:
    each stops at once and the agent takes a new send. Letta's answer: each run id with
    ``cancelled`` (or ``failed``: no run of this agent); a 409 when nothing of it runs."""
    return await agent_runs.cancel(state.engine, org, agent_id, body.run_ids if body is not None else None, now=now)
