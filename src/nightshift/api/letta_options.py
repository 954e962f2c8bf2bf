"""Options of Letta's send requests that nightshift does not carry out: refused, never ignored.

Letta's clients send only the options a caller sets, so a request that leaves these alone (or
gives the default value) is taken; one that asks for what nightshift cannot do is a 422 naming
the option, rather than a 200 that did something else than asked. ``SendRefusals`` holds the
options of every send (``/messages``, ``/stream``, ``/async``, and each request of a batch run);
``BatchRefusals`` adds those a batch run cannot honour although a single send can.

Unknown fields stay ignored (``extra="ignore"``, as every body): Letta's clients send fields of
newer servers, and refusing each would break them for nothing.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from nightshift.api.letta_messages import MESSAGE_KWARG, SEND_MESSAGE

# The values of enable_thinking that do not ask for thinking (Letta types it as a string).
NO_THINKING: Final = frozenset({"false", "0", "no", "off"})


def _refused(option: str, why: str) -> ValueError:
    return ValueError(f"{option} is not supported: {why}")


class SendRefusals(BaseModel):
    """Letta's send options that nightshift refuses when set to anything but their default."""

    model_config = ConfigDict(extra="ignore")

    enable_thinking: str | bool | None = None
    include_compaction_messages: bool = False
    return_logprobs: bool = False
    top_logprobs: int | None = None
    return_token_ids: bool = False
    client_skills: list[Any] | None = None

    @field_validator("enable_thinking")
    @classmethod
    def _no_thinking(cls, value: str | bool | None) -> str | bool | None:
        if value is None or value is False or (isinstance(value, str) and value.strip().lower() in NO_THINKING):
            return value
        raise _refused(
            "enable_thinking",
            "nightshift does not turn on a model's extended thinking; agents reason in their tool calls"
            " (shown as reasoning_message). Leave it unset or 'false'",
        )

    @field_validator("include_compaction_messages")
    @classmethod
    def _no_compaction_messages(cls, value: bool) -> bool:
        if value:
            raise _refused(
                "include_compaction_messages",
                "a send's response never shows summary or event messages; the summary is in the agent's"
                " messages (GET /v1/agents/{agent_id}/messages). Leave it unset or false",
            )
        return value

    @field_validator("return_logprobs", "return_token_ids")
    @classmethod
    def _no_token_data(cls, value: bool, info: ValidationInfo) -> bool:
        if value:
            raise _refused(str(info.field_name), "nightshift does not ask the providers for tokens' log probabilities")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _no_top_logprobs(cls, value: int | None) -> int | None:
        if value is not None:
            raise _refused("top_logprobs", "nightshift does not ask the providers for tokens' log probabilities")
        return value

    @field_validator("client_skills")
    @classmethod
    def _no_client_skills(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise _refused("client_skills", "nightshift agents have no skills section in their system prompt")
        return value


class BatchRefusals(SendRefusals):
    """A batch request's options beyond :class:`SendRefusals` that only a single send carries out.

    A batch run's messages are listed in one shape (``GET /v1/messages/batches/{id}/messages``),
    and its steps go to each agent's own model with its own system message.
    """

    override_model: str | None = None
    override_system: str | None = None
    use_assistant_message: bool = True
    assistant_message_tool_name: str | None = None
    assistant_message_tool_kwarg: str | None = None
    include_return_message_types: list[str] | None = None

    @field_validator("override_model", "override_system")
    @classmethod
    def _no_override(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            raise _refused(
                str(info.field_name),
                "a batch run steps each agent with its own model and system message; send to the agent"
                " (POST /v1/agents/{agent_id}/messages) for a one-off change",
            )
        return value

    @field_validator("use_assistant_message")
    @classmethod
    def _assistant_messages(cls, value: bool) -> bool:
        if not value:
            raise _refused("use_assistant_message", _ONE_SHAPE)
        return value

    @field_validator("assistant_message_tool_name", "assistant_message_tool_kwarg", "include_return_message_types")
    @classmethod
    def _one_shape(cls, value: Any, info: ValidationInfo) -> Any:
        defaults = {"assistant_message_tool_name": SEND_MESSAGE, "assistant_message_tool_kwarg": MESSAGE_KWARG}
        if value is not None and value != defaults.get(str(info.field_name)):
            raise _refused(str(info.field_name), _ONE_SHAPE)
        return value


_ONE_SHAPE: Final = "a batch run's messages are listed in one shape, whatever its requests ask; leave it unset"
