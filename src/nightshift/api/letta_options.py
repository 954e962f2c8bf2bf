"""Options of Letta's send requests that nightshift does not carry out: refused, never ignored.

Letta's clients send only the options a caller sets, so a request that leaves these alone (or
gives the default value) is taken; one that asks for what nightshift cannot do is a 422 naming
the option, rather than a 200 that did something else than asked. ``SendRefusals`` holds the
options of a send (``/messages``, ``/stream``, ``/async``); :func:`refuse_batch_options` checks
each request of a batch run, which cannot honour a few more (``BATCH_OPTIONS``).

Unknown fields stay ignored (``extra="ignore"``, as every body): Letta's clients send fields of
newer servers, and refusing each would break them for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from nightshift.api.letta_messages import MESSAGE_KWARG, SEND_MESSAGE
from nightshift.errors import InvalidInput

# The values of enable_thinking that do not ask for thinking (Letta types it as a string).
NO_THINKING: Final = frozenset({"false", "0", "no", "off"})
_NO_LOGPROBS: Final = "nightshift does not ask the providers for tokens' log probabilities"
_ONE_SHAPE: Final = "a batch run's messages are listed in one shape, whatever its requests ask; leave it unset"
_OWN_SETTINGS: Final = (
    "a batch run steps each agent with its own model and system message; send to the agent"
    " (POST /v1/agents/{agent_id}/messages) for a one-off change"
)


def _no_thinking(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, str) and value.strip().lower() in NO_THINKING)


def _unset_or(default: Any) -> Callable[[Any], bool]:
    return lambda value: value is None or value == default


def _falsy(value: Any) -> bool:
    return not value


# Each option: whether a value is one nightshift carries out (the default, or asking for nothing),
# and why any other is refused.
Options = Mapping[str, tuple[Callable[[Any], bool], str]]
SEND_OPTIONS: Final[Options] = {
    "enable_thinking": (
        _no_thinking,
        "nightshift does not turn on a model's extended thinking; agents reason in their tool calls"
        " (shown as reasoning_message). Leave it unset or 'false'",
    ),
    "include_compaction_messages": (
        _falsy,
        "a send's response never shows summary or event messages; the summary is in the agent's"
        " messages (GET /v1/agents/{agent_id}/messages). Leave it unset or false",
    ),
    "return_logprobs": (_falsy, _NO_LOGPROBS),
    "top_logprobs": (_unset_or(None), _NO_LOGPROBS),
    "return_token_ids": (_falsy, _NO_LOGPROBS),
    "client_skills": (_falsy, "nightshift agents have no skills section in their system prompt"),
}
BATCH_OPTIONS: Final[Options] = {
    **SEND_OPTIONS,
    "override_model": (_unset_or(None), _OWN_SETTINGS),
    "override_system": (_unset_or(None), _OWN_SETTINGS),
    "use_assistant_message": (_unset_or(True), _ONE_SHAPE),
    "assistant_message_tool_name": (_unset_or(SEND_MESSAGE), _ONE_SHAPE),
    "assistant_message_tool_kwarg": (_unset_or(MESSAGE_KWARG), _ONE_SHAPE),
    "include_return_message_types": (_unset_or(None), _ONE_SHAPE),
}


def refusal(option: str, value: Any, options: Options = SEND_OPTIONS) -> str | None:
    """Why ``value`` of ``option`` is refused, or None when nightshift carries it out."""
    accepts, why = options[option]
    return None if accepts(value) else f"{option} is not supported: {why}"


class SendRefusals(BaseModel):
    """Letta's send options that nightshift refuses when set to anything but their default."""

    model_config = ConfigDict(extra="ignore")

    enable_thinking: str | bool | None = None
    include_compaction_messages: bool = False
    return_logprobs: bool = False
    top_logprobs: int | None = None
    return_token_ids: bool = False
    client_skills: list[Any] | None = None

    @field_validator(*SEND_OPTIONS)
    @classmethod
    def _carried_out(cls, value: Any, info: ValidationInfo) -> Any:
        problem = refusal(str(info.field_name), value)
        if problem is not None:
            raise ValueError(problem)
        return value


def refuse_batch_options(requests: list[Any]) -> None:
    """Raise ``InvalidInput`` naming the first option of a batch run's requests (as parsed JSON)
    that the run would not carry out.

    Checked on the parsed body, in one pass over the requests' keys, rather than as fields of
    each request's model: a run of tens of thousands of requests seldom sets any, and each
    field a request's model declares costs its validation and storage check for every request.
    """
    for index, request in enumerate(requests):
        if not isinstance(request, dict):
            continue
        for option in request.keys() & BATCH_OPTIONS.keys():
            problem = refusal(option, request[option], BATCH_OPTIONS)
            if problem is not None:
                raise InvalidInput(problem, field=f"requests.{index}.{option}")
