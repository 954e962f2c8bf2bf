"""The scripted model as a sleep-time agent: it reads the transcript it is given, inserts the facts
the user stated into the shared memory in one call, then finishes its edits."""

from __future__ import annotations

import json
from typing import Any

from nightshift.emulator.model import ModelInput, ModelOutput, ToolChoice, ToolSpec, Turn, respond
from nightshift.emulator.sleeptime import block_labels, user_facts


def tool(name: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(name=name, parameters={"type": "object", "properties": properties, "required": required})


INSERT = tool(
    "memory_insert",
    {"label": {"type": "string"}, "new_str": {"type": "string"}, "insert_line": {"type": "integer"}},
    ["label", "new_str"],
)
REPLACE = tool(
    "memory_replace",
    {"label": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
    ["label", "old_str", "new_str"],
)
RETHINK = tool(
    "memory_rethink", {"label": {"type": "string"}, "new_memory": {"type": "string"}}, ["label", "new_memory"]
)
FINISH = tool("memory_finish_edits", {}, [])
SLEEPTIME_TOOLS = (INSERT, REPLACE, RETHINK, FINISH)

FRAME = (
    "<system-reminder>\nYou are a sleep-time agent: you work in the background, after a conversation "
    "has happened.\n</system-reminder>\n\nMessages:\n"
)


def transcript(*lines: str) -> str:
    return FRAME + "\n".join(lines)


def memory(**blocks: str) -> str:
    """A system prompt with ``blocks`` compiled in as nightshift compiles them."""
    parts = ["You keep the memory.", "<memory_blocks>", "Your core memory."]
    for label, value in blocks.items():
        parts += [f"<{label}>", "<metadata>chars_current=1 chars_limit=500</metadata>", f"<value>\n{value}\n</value>"]
        parts.append(f"</{label}>")
    return "\n".join([*parts, "</memory_blocks>"])


SYSTEM = memory(persona="I am a helper.", human="Nothing known yet.", memory_persona="I keep the memory.")


def ask(*turns: Turn, system: str = SYSTEM, tools: tuple[ToolSpec, ...] = SLEEPTIME_TOOLS) -> ModelOutput:
    return respond(ModelInput(system=system, turns=turns, tools=tools, tool_choice=ToolChoice(mode="auto")))


def user(text: str) -> Turn:
    return Turn(role="user", text=text)


CHAT = transcript(
    "user: Hi there! My name is Ada.",
    "assistant: Nice to meet you, Ada.",
    "user: I live in Lyon and I work as a nurse",
    "assistant: Calling tool get_weather",
    "assistant: Tool call returned Sunny",
    "user: What is the weather like?",
)


def test_it_inserts_every_stated_fact_into_the_human_block_in_one_call_without_text() -> None:
    output = ask(user(CHAT))

    assert [c.tool_name for c in output.calls] == ["memory_insert"]
    assert output.arguments["label"] == "human"
    assert output.arguments["new_str"] == "The user's name is Ada\nThe user lives in Lyon and they work as a nurse"
    assert output.text is None  # a letta_v1 model speaks only in its final answer


def test_after_a_memory_tool_ran_it_finishes_its_edits() -> None:
    for ran in ("memory_insert", "memory_rethink"):
        output = ask(
            user(CHAT),
            Turn(role="assistant", tool_name=ran),
            Turn(role="tool", text='{"status": "OK", "message": "edited"}', tool_name=ran),
        )
        assert [c.tool_name for c in output.calls] == ["memory_finish_edits"]
        assert output.text is None


def test_a_transcript_without_a_stated_fact_is_finished_at_once() -> None:
    chat = transcript("user: What time is it?", "assistant: It is noon.", "user: thanks!")

    assert ask(user(chat)).tool_name == "memory_finish_edits"


def test_facts_the_block_already_holds_are_not_written_again() -> None:
    system = memory(persona="I am a helper.", human="The user's name is Ada")

    assert ask(user(transcript("user: my name is Ada")), system=system).tool_name == "memory_finish_edits"
    again = ask(user(transcript("user: my name is Ada", "user: I love jazz.")), system=system)
    assert again.arguments["new_str"] == "The user loves jazz"


def test_without_a_human_block_the_first_block_not_its_own_gets_the_facts() -> None:
    system = memory(memory_persona="I keep the memory.", persona="I am a helper.", customer="New.", notes="None.")

    assert block_labels(system) == ["memory_persona", "persona", "customer", "notes"]
    assert ask(user(transcript("user: I prefer tea")), system=system).arguments["label"] == "customer"
    only_own = memory(persona="I am a helper.", memory_persona="I keep the memory.")
    assert ask(user(transcript("user: I prefer tea")), system=only_own).tool_name == "memory_finish_edits"


def test_the_transcript_wrapped_as_a_letta_user_message_is_read_too() -> None:
    wrapped = '{"type": "user_message", "message": ' + json.dumps(CHAT) + "}"

    assert ask(user(wrapped)).tool_name == "memory_insert"


def test_facts_are_the_users_statements_about_themselves_in_the_third_person() -> None:
    chat = transcript(
        "user: Please remember that my sister is called Eve; I'm allergic to peanuts.",
        "user: I really like hiking with my dog. My favourite colour is green!",
        "user: Call me Bob. I have two cats.",
        "assistant: My name is Helper.",  # the assistant's words are not the user's facts
        "user: Can you help me with my taxes?",
        "user: I'm from Oslo",
        "user: Hello, my name is Basil! Well, I think so, I hate rain",
    )

    assert user_facts(chat) == [
        "The user's sister is called Eve",
        "The user is allergic to peanuts",
        "The user really likes hiking with their dog",
        "The user's favourite colour is green",
        "The user goes by Bob",
        "The user has two cats",
        "The user is from Oslo",
        "The user's name is Basil",
        "The user hates rain",
    ]


def test_an_agent_without_memory_finish_edits_or_without_a_transcript_gets_the_other_rules() -> None:
    send = tool("send_message", {"message": {"type": "string"}}, ["message"])

    assert ask(user(CHAT), tools=(INSERT, send)).tool_name != "memory_finish_edits"
    plain = ask(user("My name is Ada"))
    assert plain.tool_name is None and plain.text  # a letta_v1 agent with nothing to do answers in text


def test_a_forced_tool_still_wins() -> None:
    forced = respond(
        ModelInput(
            system=SYSTEM,
            turns=(user(CHAT),),
            tools=SLEEPTIME_TOOLS,
            tool_choice=ToolChoice(mode="tool", name="memory_finish_edits"),
        )
    )

    assert forced.tool_name == "memory_finish_edits"
