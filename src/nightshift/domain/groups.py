"""Letta's multi-agent groups, of which nightshift runs one kind: a main agent and its sleep-time agent.

A sleep-time group pairs a main agent (the one the user talks to; its ``managed_group_id``
names the group) with a ``sleeptime_agent`` that shares its memory blocks. Every
``sleeptime_agent_frequency`` turns of the main agent the sleep-time agent is due: it reads the
transcript of what was said since its last run, in one user message (``transcript_message``,
framed as Letta frames it), and reorganises the shared blocks with its memory tools. The poller
gathers the due ones into batch runs of their own (``batch/sleeptime.py``), so that they run at
batch price and the main agent never waits for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from nightshift.domain.fast_init import fast_init
from nightshift.domain.messages import SEND_MESSAGE, Message, MessageKind, Role
from nightshift.errors import InvalidInput

# What Letta gives a group made by ``enable_sleeptime``.
DEFAULT_SLEEPTIME_FREQUENCY = 5
# The sleep-time agent's name: its main agent's, with this after it (as Letta names it).
SLEEPTIME_SUFFIX = "-sleeptime"


class ManagerType(StrEnum):
    """How a group's agents take turns (Letta's ``manager_type``); nightshift runs ``sleeptime``."""

    ROUND_ROBIN = "round_robin"
    SUPERVISOR = "supervisor"
    DYNAMIC = "dynamic"
    SLEEPTIME = "sleeptime"
    VOICE_SLEEPTIME = "voice_sleeptime"
    SWARM = "swarm"


def check_manager_type(value: str, *, field_name: str = "manager_config.manager_type") -> ManagerType:
    """The manager type named, or InvalidInput saying that nightshift runs sleep-time groups only."""
    try:
        manager_type = ManagerType(value)
    except ValueError:
        raise InvalidInput(
            f"unknown manager_type {value!r}; nightshift runs sleeptime groups", field=field_name
        ) from None
    if manager_type is not ManagerType.SLEEPTIME:
        raise InvalidInput(
            f"manager_type {value!r} is not supported; nightshift runs sleeptime groups only", field=field_name
        )
    return manager_type


def check_frequency(value: int | None, *, field_name: str = "manager_config.sleeptime_agent_frequency") -> int | None:
    """A sleep-time frequency: a number of turns, at least 1 (None: every turn, as in Letta)."""
    if value is not None and value < 1:
        raise InvalidInput("sleeptime_agent_frequency must be at least 1 (or null: every turn)", field=field_name)
    return value


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    """A sleep-time group: its main agent (``manager_agent_id``) and its sleep-time agents.

    ``turns_counter`` counts the main agent's finished turns; ``due_since`` is set when a turn
    makes the sleep-time agents due and cleared when the poller gathers them into a batch run, in
    the same transaction as the run: a crash between the two loses nothing and runs nothing
    twice. ``last_processed_message_id`` is the main agent's last message the sleep-time agents
    were given; the next transcript starts after it.
    """

    id: str
    organization_id: str
    manager_type: ManagerType
    description: str = ""
    agent_ids: tuple[str, ...] = ()
    manager_agent_id: str | None = None
    sleeptime_agent_frequency: int | None = DEFAULT_SLEEPTIME_FREQUENCY
    turns_counter: int = 0
    last_processed_message_id: str | None = None
    due_since: datetime | None = None
    shared_block_ids: tuple[str, ...] = ()
    hidden: bool | None = None
    created_at: datetime
    updated_at: datetime


# The user message a sleep-time agent gets: a reminder of what it is, then the transcript under
# "Messages:", one ``role: text`` line each, the frame Letta's sleep-time manager gives it.
_TRANSCRIPT_HEADER = (
    "<system-reminder>\n"
    "You are a sleep-time agent: you work in the background, after a conversation has happened, and "
    "nobody waits for your answer.\n\n"
    "You are not the agent in this conversation. It took place between a primary agent and its user:\n"
    '- lines starting with "assistant" are the primary agent\'s (not yours)\n'
    '- lines starting with "user" are its user\'s\n\n'
    "Your job is the shared memory: read the conversation and keep what is worth keeping in the memory "
    "blocks, with your memory tools, then call memory_finish_edits. Your memory_persona block may hold "
    "more instructions.\n"
    "</system-reminder>\n\n"
)


def transcript_message(messages: Iterable[Message]) -> str:
    """The sleep-time agent's input: the main agent's messages as ``role: text`` lines, framed.

    As Letta writes them: a user's words as ``user: ...`` (or the sender's name), the assistant's
    text, thinking and ``send_message`` words as ``assistant: ...``, another tool call as
    ``assistant: Calling tool NAME``, a tool's result as ``assistant: Tool call returned ...``;
    system messages and the system's events in the user's turn (heartbeats, logins, notices) are
    left out.
    """
    lines = [line for message in messages for line in _lines(message)]
    return _TRANSCRIPT_HEADER + "Messages:\n" + "\n".join(lines)


def _lines(message: Message) -> list[str]:
    if message.role is Role.USER:
        if message.kind is not MessageKind.PLAIN:
            return []
        speaker = message.name or "user"
        words = [f"{speaker}: {message.text}"] if message.text else []
        return words + [f"{speaker}: [Image Here]" for _ in message.images]
    if message.role is Role.ASSISTANT:
        lines = [f"assistant: {message.text}"] if message.text else []
        if message.reasoning:
            lines.append(f"assistant: <thinking>{message.reasoning}</thinking>")
        for call in message.tool_calls:
            said = _argument(call.arguments, "message") if call.name == SEND_MESSAGE else None
            lines.append(f"assistant: {said}" if said is not None else f"assistant: Calling tool {call.name}")
        return lines
    if message.role is Role.TOOL:
        returned = _argument(message.text, "message")
        returned = message.text if returned is None else returned
        return [f"assistant: Tool call returned {returned}"] if returned and returned != "None" else []
    return []


def _argument(text: str, name: str) -> str | None:
    """The string ``name`` of a JSON object, if ``text`` is one that has it."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    found = value.get(name) if isinstance(value, dict) else None
    return None if found is None else str(found)
