"""The emulator's scripted model as a sleep-time agent: it inserts what the user stated, then finishes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nightshift.domain.blocks import Block
from nightshift.domain.groups import transcript_message
from nightshift.domain.messages import Message, Role, ToolCall
from nightshift.emulator.model import ModelInput, ToolChoice, ToolSpec, Turn, respond
from nightshift.runtime.memory import compile_blocks

NOW = datetime(2030, 1, 1, tzinfo=UTC)
MEMORY_TOOLS = tuple(
    ToolSpec(name=name, parameters={"type": "object", "properties": properties})
    for name, properties in (
        ("memory_insert", {"label": {"type": "string"}, "new_str": {"type": "string"}}),
        ("memory_replace", {"label": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}}),
        ("memory_rethink", {"label": {"type": "string"}, "new_memory": {"type": "string"}}),
        ("memory_finish_edits", {}),
    )
)


def _message(role: Role, text: str, **extra: Any) -> Message:
    return Message(id="m", organization_id="o", agent_id="a", role=role, text=text, created_at=NOW, **extra)


def _memory(*labels: str) -> str:
    blocks = [
        Block(id=label, organization_id="o", label=label, value="", limit=500, created_at=NOW, updated_at=NOW)
        for label in labels
    ]
    return "You keep memory.\n" + compile_blocks(blocks)


def _ask(said: list[Message], *after: Turn, labels: tuple[str, ...] = ("memory_persona", "persona", "human")) -> Any:
    turns = (Turn(role="user", text=transcript_message(said)), *after)
    return respond(ModelInput(system=_memory(*labels), turns=turns, tools=MEMORY_TOOLS, tool_choice=ToolChoice()))


CONVERSATION = [
    _message(Role.USER, "Hi! My name is Ada."),
    _message(
        Role.ASSISTANT, "", tool_calls=(ToolCall(id="c", name="send_message", arguments='{"message": "Hello Ada"}'),)
    ),
    _message(Role.USER, "What is the weather like?"),
    _message(Role.USER, "I live in Lyon and I like tea."),
]


def test_the_facts_the_user_stated_go_into_the_human_block_in_one_insert() -> None:
    output = _ask(CONVERSATION)
    assert output.tool_name == "memory_insert"
    assert output.arguments == {"label": "human", "new_str": "Hi! My name is Ada.\nI live in Lyon and I like tea."}
    assert output.text is None  # a letta_v1 request: a call without text


def test_after_a_tool_ran_it_finishes_its_edits() -> None:
    ran = Turn(role="tool", text='{"status": "OK", "message": "edited"}', tool_name="memory_insert")
    assert _ask(CONVERSATION, Turn(role="assistant", tool_name="memory_insert"), ran).tool_name == "memory_finish_edits"


def test_nothing_stated_finishes_at_once() -> None:
    assert _ask([_message(Role.USER, "What time is it?")]).tool_name == "memory_finish_edits"


def test_without_a_human_block_the_first_block_that_is_no_persona_keeps_the_facts() -> None:
    output = _ask(CONVERSATION, labels=("persona", "notes", "todo"))
    assert output.arguments["label"] == "notes"


def test_a_plain_message_to_an_agent_with_the_same_tools_is_no_sleeptime_request() -> None:
    turns = (Turn(role="user", text="My name is Ada."),)
    output = respond(ModelInput(system=_memory("human"), turns=turns, tools=MEMORY_TOOLS, tool_choice=ToolChoice()))
    assert output.tool_name != "memory_finish_edits"
