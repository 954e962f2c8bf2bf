"""The emulator's scripted model and argument generator: deterministic answers that fit the tools."""

from __future__ import annotations

import json
from typing import Any

from nightshift.emulator.arguments import generate_arguments
from nightshift.emulator.model import ModelInput, ToolChoice, ToolSpec, Turn, respond
from nightshift.emulator.texts import is_heartbeat, unwrap
from nightshift.providers.agent_arguments import with_agent_arguments


def tool(name: str, properties: dict[str, Any], required: list[str] | None = None) -> ToolSpec:
    schema = {"type": "object", "properties": properties, "required": required or list(properties)}
    return ToolSpec(name=name, parameters=with_agent_arguments(schema))


SEND = tool("send_message", {"message": {"type": "string"}})
APPEND = tool("core_memory_append", {"label": {"type": "string"}, "content": {"type": "string"}})
RETHINK = tool("rethink_memory", {"new_memory": {"type": "string"}, "target_block_label": {"type": "string"}})
WEATHER = tool(
    "get_weather",
    {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "detailed": {"type": "boolean"},
    },
)
TOOLS = (SEND, APPEND, WEATHER)


def ask(*turns: Turn, tools: tuple[ToolSpec, ...] = TOOLS, choice: ToolChoice | None = None, system: str = "") -> Any:
    return respond(ModelInput(system=system, turns=turns, tools=tools, tool_choice=choice or ToolChoice(mode="any")))


def user(text: str) -> Turn:
    return Turn(role="user", text=text)


def test_named_custom_tool_is_called_with_arguments_from_the_message() -> None:
    output = ask(user("Please use get_weather for Paris over 3 days"))

    assert output.tool_name == "get_weather"
    assert output.arguments["city"] == "Paris"
    assert output.arguments["days"] == 3
    assert output.arguments["units"] == "celsius"
    assert output.arguments["detailed"] is True
    assert output.arguments["request_heartbeat"] is True
    assert output.arguments["inner_thoughts"]
    assert next(iter(output.arguments)) == "inner_thoughts"


def test_tool_named_with_spaces_is_found_too() -> None:
    assert ask(user("what does get weather say for Oslo?")).tool_name == "get_weather"


def test_explicit_values_win() -> None:
    output = ask(user("call get_weather with city=Lisbon and days: 12"))

    assert output.arguments["city"] == "Lisbon"
    assert output.arguments["days"] == 7  # clamped to the schema's maximum


def test_after_a_tool_result_it_summarises_with_send_message() -> None:
    output = ask(
        user("use get_weather for Paris"),
        Turn(role="assistant", tool_name="get_weather"),
        Turn(role="tool", text='{"status": "OK", "message": "Sunny, 21C"}', tool_name="get_weather"),
        user('{"type": "heartbeat", "reason": "request_heartbeat=true"}'),
    )

    assert output.tool_name == "send_message"
    assert "Sunny, 21C" in output.arguments["message"]
    assert output.arguments["request_heartbeat"] is False


def test_failed_tool_is_reported() -> None:
    output = ask(
        user("use get_weather"),
        Turn(role="tool", text="Timeout", tool_name="get_weather", is_error=True),
    )

    assert output.tool_name == "send_message"
    assert "failed" in output.arguments["message"]


def test_remember_calls_a_memory_tool() -> None:
    output = ask(user("Please remember that my favourite colour is blue."))

    assert output.tool_name == "core_memory_append"
    assert output.arguments["label"] == "human"
    assert output.arguments["content"] == "my favourite colour is blue"
    assert output.arguments["request_heartbeat"] is True


def test_rethink_memory_keeps_the_block_it_finds_in_the_system_prompt() -> None:
    output = ask(
        user("remember I live in Rome"),
        tools=(SEND, RETHINK),
        system="<human characters='9'>Name: Bob</human>",
    )

    assert output.tool_name == "rethink_memory"
    assert output.arguments["target_block_label"] == "human"
    assert output.arguments["new_memory"] == "Name: Bob\nI live in Rome"


def test_plain_message_gets_a_reply() -> None:
    output = ask(user('{"type": "user_message", "message": "Hello there"}'))

    assert output.tool_name == "send_message"
    assert "Hello there" in output.arguments["message"]
    assert output.arguments["request_heartbeat"] is False


def test_forced_tool_is_honoured() -> None:
    output = ask(user("hello"), choice=ToolChoice(mode="tool", name="get_weather"))
    assert output.tool_name == "get_weather"
    forced_send = ask(user("use get_weather"), choice=ToolChoice(mode="tool", name="send_message"))
    assert forced_send.tool_name == "send_message"


def test_no_tools_or_choice_none_gives_text() -> None:
    assert ask(user("hi"), tools=()).text
    output = ask(user("hi"), choice=ToolChoice(mode="none"))
    assert output.tool_name is None and output.text


def test_required_call_without_send_message_uses_a_tool() -> None:
    output = ask(user("hi"), tools=(WEATHER,))

    assert output.tool_name == "get_weather"


def test_tools_without_inner_thoughts_get_reasoning_as_text() -> None:
    # A memgpt request (request_heartbeat there) whose tool has no inner_thoughts argument.
    properties = {"message": {"type": "string"}, "request_heartbeat": {"type": "boolean"}}
    bare = ToolSpec(name="send_message", parameters={"type": "object", "properties": properties})
    output = ask(user("hi"), tools=(bare,))

    assert set(output.arguments) == {"message", "request_heartbeat"}
    assert output.text


LOOKUP = ToolSpec(
    name="lookup_city", parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)
AUTO = ToolChoice(mode="auto")


def test_a_letta_v1_request_is_answered_in_text_when_there_is_nothing_to_call() -> None:
    output = ask(user("hello"), tools=(LOOKUP,), choice=AUTO)

    assert output.calls == ()
    assert output.text is not None and "hello" in output.text


def test_a_letta_v1_request_calls_the_tool_asked_for_without_text_then_answers_with_its_results() -> None:
    first = ask(user("Please use lookup_city for Paris and Rome"), tools=(LOOKUP,), choice=AUTO)
    assert [c.arguments for c in first.calls] == [{"city": "Paris"}]
    assert first.text is None
    turns: tuple[Turn, ...] = (
        user("Please use lookup_city for Paris and Rome"),
        Turn(role="assistant", tool_name="lookup_city"),
        Turn(role="tool", tool_name="lookup_city", text="Paris: sunny"),
    )
    second = ask(*turns, tools=(LOOKUP,), choice=AUTO)
    assert [c.arguments for c in second.calls] == [{"city": "Rome"}]
    turns += (
        Turn(role="assistant", tool_name="lookup_city"),
        Turn(role="tool", tool_name="lookup_city", text="Rome: rain"),
    )
    last = ask(*turns, tools=(LOOKUP,), choice=AUTO)
    assert last.calls == ()
    assert last.text is not None and "Paris: sunny" in last.text and "Rome: rain" in last.text


def test_a_letta_v1_request_that_forces_a_call_gets_one() -> None:
    output = ask(user("hello"), tools=(LOOKUP,), choice=ToolChoice(mode="any"))

    assert output.tool_name == "lookup_city"
    assert output.text is None


def test_deterministic() -> None:
    turns = (user("use get_weather for Paris"),)
    assert ask(*turns) == ask(*turns)


def test_heartbeats_and_wrapped_messages() -> None:
    assert is_heartbeat('{"type": "heartbeat"}')
    assert is_heartbeat("[automated] request_heartbeat=true")
    assert not is_heartbeat('{"type": "user_message", "message": "heartbeat?"}')
    assert unwrap('{"type": "user_message", "message": "hi"}') == "hi"
    assert unwrap("plain") == "plain"


def test_argument_generation_covers_schema_types() -> None:
    schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "ratio": {"type": "number"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
            "nested": {"type": "object", "properties": {"flag": {"type": "boolean"}}},
            "fixed": {"const": "x"},
            "optional": {"type": "string"},
        },
        "required": ["query", "tags", "ratio", "maybe", "nested", "fixed"],
    }
    arguments = generate_arguments(schema, "find Alice 2.5 times")

    assert arguments == {
        "query": "find Alice 2.5 times",
        "tags": ["find"],  # the second content word for the second property
        "ratio": 2.5,
        "maybe": 2,
        "nested": {"flag": True},
        "fixed": "x",
    }
    json.dumps(arguments)


def test_asked_to_remember_a_tool_result_it_saves_it_then_reports() -> None:
    system = "<human>\n<metadata>chars_current=9 chars_limit=100</metadata>\n<value>\nLikes tea\n</value>\n</human>"
    asked = user("use get_weather for Paris and remember the result")
    called = Turn(role="assistant", tool_name="get_weather")
    result = Turn(role="tool", text='{"status": "OK", "message": "Sunny, 21C"}', tool_name="get_weather")
    save = ask(asked, called, result, system=system)
    assert save.tool_name == "core_memory_append"
    assert save.arguments["label"] == "human"
    assert save.arguments["content"] == "Sunny, 21C"
    assert save.arguments["request_heartbeat"] is True

    rethought = ask(asked, called, result, tools=(SEND, RETHINK, WEATHER), system=system)
    assert rethought.arguments["new_memory"] == "Likes tea\nSunny, 21C"

    saved = Turn(role="tool", text='{"status": "OK", "message": "Appended"}', tool_name="core_memory_append")
    final = ask(asked, called, result, Turn(role="assistant", tool_name="core_memory_append"), saved, system=system)
    assert final.tool_name == "send_message"
    assert final.arguments["request_heartbeat"] is False


# Several calls in one turn, when the request allows them.

CITY = tool("get_weather", {"city": {"type": "string"}})
THREE = "Look up the weather in Paris, Rome and New York with get_weather, please."


def run_task(first: Turn, *, parallel: bool, tools: tuple[ToolSpec, ...] = (SEND, APPEND, CITY)) -> list[list[Any]]:
    """The calls of each turn until send_message, every call answered with an OK result."""
    turns = [first]
    rounds: list[list[Any]] = []
    for _ in range(8):
        output = respond(
            ModelInput(turns=tuple(turns), tools=tools, tool_choice=ToolChoice(mode="any"), parallel=parallel)
        )
        rounds.append(
            [(c.tool_name, {k: v for k, v in c.arguments.items() if k != "inner_thoughts"}) for c in output.calls]
        )
        if any(c.tool_name == "send_message" for c in output.calls):
            return rounds
        turns.extend(Turn(role="assistant", tool_name=c.tool_name) for c in output.calls)
        turns.extend(
            Turn(
                role="tool",
                tool_name=c.tool_name,
                text=json.dumps({"status": "OK", "message": f"Sunny in {c.arguments.get('city')}"}),
            )
            for c in output.calls
        )
        turns.append(user('{"type": "heartbeat"}'))
    raise AssertionError("no send_message")


def test_listed_things_are_looked_up_in_one_turn_with_parallel_calls() -> None:
    first, final = run_task(user(THREE), parallel=True)

    assert first == [("get_weather", {"city": c, "request_heartbeat": True}) for c in ("Paris", "Rome", "New York")]
    (said,) = final
    assert said[1]["message"] == (
        "get_weather returned: Sunny in Paris; get_weather returned: Sunny in Rome; "
        "get_weather returned: Sunny in New York"
    )


def test_listed_things_are_looked_up_one_per_turn_without_parallel_calls() -> None:
    rounds = run_task(user(THREE), parallel=False)

    assert [r[0][1].get("city") for r in rounds[:3]] == ["Paris", "Rome", "New York"]
    assert [len(r) for r in rounds] == [1, 1, 1, 1]
    assert "Sunny in Paris" in rounds[3][0][1]["message"] and "Sunny in New York" in rounds[3][0][1]["message"]


def test_several_facts_are_saved_with_the_answer_in_one_turn_with_parallel_calls() -> None:
    facts = user("Please remember: my name is Ada; I live in Lyon; I like green tea.")

    (only,) = run_task(facts, parallel=True)
    assert [name for name, _ in only] == ["core_memory_append"] * 3 + ["send_message"]
    assert [arguments.get("content") for _, arguments in only[:3]] == [
        "my name is Ada",
        "I live in Lyon",
        "I like green tea",
    ]

    one_by_one = run_task(facts, parallel=False)
    assert [[name for name, _ in r] for r in one_by_one] == [["core_memory_append"]] * 3 + [["send_message"]]
    assert [r[0][1]["content"] for r in one_by_one[:3]] == ["my name is Ada", "I live in Lyon", "I like green tea"]


def test_one_thing_is_one_call_either_way() -> None:
    for parallel in (True, False):
        output = respond(ModelInput(turns=(user("use get_weather for Paris"),), tools=(SEND, CITY), parallel=parallel))
        assert [c.tool_name for c in output.calls] == ["get_weather"]


READ = tool("read_page", {"page": {"type": "integer"}})


def test_a_result_that_asks_for_another_call_gets_it() -> None:
    result = Turn(
        role="tool", tool_name="read_page", text=json.dumps({"message": "p3 ... More: call read_page with page=4."})
    )

    answer = ask(user("read the report"), Turn(role="assistant", tool_name="read_page"), result, tools=(SEND, READ))

    assert answer.tool_name == "read_page"
    assert answer.arguments["page"] == 4 and answer.arguments["request_heartbeat"] is True


def test_system_alerts_are_not_the_user_speaking() -> None:
    alert = json.dumps({"type": "system_alert", "message": "Warning: read_page your context window is filling up."})

    assert is_heartbeat(alert)
    # The alert names a tool, but only the user's message picks what to call.
    answer = ask(user("hello there"), user(alert), tools=(SEND, READ))
    assert answer.tool_name == "send_message"


def test_a_summarizing_request_is_answered_with_a_summary_of_its_transcript() -> None:
    transcript = "\n".join(
        ["The conversation to summarize:", "", "[user] read the report", "[agent] called read_page(1)", "[result] p1"]
    )

    answer = respond(ModelInput(system="Write the summary that will stand in for it.", turns=(user(transcript),)))

    assert answer.calls == () and answer.text is not None
    assert answer.text.startswith("Summary of 3 messages:") and "read the report" in answer.text
