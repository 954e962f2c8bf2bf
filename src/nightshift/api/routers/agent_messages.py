"""POST /v1/agents/{id}/messages: step one agent synchronously, as a batch step would."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from nightshift.api.batch_schemas import InputMessage, TextPart, input_turns
from nightshift.api.deps import Org, State
from nightshift.api.input import Body
from nightshift.api.letta_messages import to_letta_messages
from nightshift.domain.limits import MAX_LIST_ITEMS, MAX_MESSAGE_CHARS, MAX_STEPS
from nightshift.errors import InvalidInput
from nightshift.runtime.step import TurnReason
from nightshift.runtime.sync import step_agent

router = APIRouter(tags=["agents"])

# Letta's stop reasons, by why the agent's last turn ended its run (the rest are "end_turn").
LETTA_STOP_REASONS = {
    TurnReason.MAX_STEPS: "max_steps",
    TurnReason.TOOL_RULES: "tool_rule",
    TurnReason.ERROR: "error",
}


class SendMessages(Body):
    """Letta's LettaRequest: ``messages`` or the ``input`` shorthand, and a step limit."""

    messages: list[InputMessage] | None = Field(default=None, max_length=MAX_LIST_ITEMS)
    input: str | list[TextPart] | None = None
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)


@router.post("/v1/agents/{agent_id}/messages")
async def send_messages(agent_id: str, body: SendMessages, state: State, org: Org) -> dict[str, Any]:
    """Send messages to an agent and step it through the provider's normal API until it stops.

    Returns Letta's response: every message the run wrote (in Letta's shapes), the stop reason
    and the token usage. A 409 while the agent is in an open step of a batch run.
    """
    texts = input_turns(body.messages, body.input)
    size = sum(len(text if isinstance(text, str) else text.text) for text in texts)
    if size > MAX_MESSAGE_CHARS:
        raise InvalidInput(
            f"the messages hold {size} characters; one request takes at most {MAX_MESSAGE_CHARS}", field="messages"
        )
    worker = state.worker
    result = await step_agent(
        state.engine,
        worker.providers,
        worker.sandbox,
        org,
        agent_id,
        texts,
        max_steps=body.max_steps or state.settings.default_max_steps,
    )
    usage = result.usage
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {
        "messages": [part for message in result.messages for part in to_letta_messages(message)],
        "stop_reason": {"message_type": "stop_reason", "stop_reason": LETTA_STOP_REASONS.get(result.stop, "end_turn")},
        "usage": {
            "message_type": "usage_statistics",
            "prompt_tokens": prompt,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "cached_input_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "step_count": result.steps,
        },
    }
