"""Letta's own Python client (letta-client 1.7.0, sync) against a real nightshift server.

The module's server (``tests/e2e/conftest.py``) runs on SQLite and on PostgreSQL, with a server
password; each test acts in an organization of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import TypeVar

import letta_client
import pytest
from letta_client import Letta

from support.api import BASE_TOOL_NAMES, DEFAULT_TOOL_NAMES
from support.orgs import SERVER_PASSWORD

MODEL = "anthropic/claude-3-5-haiku-20241022"
T = TypeVar("T")

ROLL_DICE = '''
import random


def roll_dice(sides: int, times: int = 1) -> str:
    """Roll a die several times.

    Args:
        sides: How many sides the die has.
        times: How many times to roll it.
    """
    return ", ".join(str(random.randint(1, sides)) for _ in range(times))
'''

SHOUT = '''
def shout(text: str) -> str:
    """Say something loudly.

    Args:
        text: What to say.
    """
    return text.upper()
'''


def every(page: Iterable[T], cap: int = 200) -> list[T]:
    """All items of an auto-paginating listing; a listing that never ends fails instead of hanging."""
    items = list(islice(page, cap))
    assert len(items) < cap, "the listing did not come to an end"
    return items


def test_tools_create_list_retrieve_update_delete(letta: Letta) -> None:
    tool = letta.tools.create(source_code=ROLL_DICE, tags=["games"])
    assert tool.id.startswith("tool-")
    assert tool.name == "roll_dice"
    assert tool.description == "Roll a die several times."
    assert tool.tool_type == "custom"
    assert tool.source_type == "python"
    assert tool.source_code == ROLL_DICE
    assert tool.tags == ["games"]
    assert tool.json_schema is not None
    assert tool.json_schema["name"] == "roll_dice"
    assert tool.json_schema["parameters"] == {
        "type": "object",
        "properties": {
            "sides": {"type": "integer", "description": "How many sides the die has."},
            "times": {"type": "integer", "description": "How many times to roll it.", "default": 1},
        },
        "required": ["sides"],
    }

    fetched = letta.tools.retrieve(tool.id)
    assert (fetched.id, fetched.name, fetched.json_schema) == (tool.id, tool.name, tool.json_schema)

    listed = every(letta.tools.list())
    assert {t.name for t in listed} == BASE_TOOL_NAMES | {"roll_dice"}
    assert len({t.id for t in listed}) == len(listed)
    # Auto-pagination in small pages sees every tool once and stops.
    paged = every(letta.tools.list(limit=3))
    assert [t.id for t in paged] == [t.id for t in listed]
    assert [t.id for t in every(letta.tools.list(name="roll_dice"))] == [tool.id]
    base = next(t for t in listed if t.name == "send_message")
    assert base.tool_type == "letta_core"

    with pytest.raises(letta_client.ConflictError):
        letta.tools.create(source_code=ROLL_DICE)
    with pytest.raises(letta_client.UnprocessableEntityError) as bad:
        letta.tools.create(source_code="def roll_dice(sides: int) -> str:\n    return 'no docstring'\n")
    assert "docstring" in str(bad.value)

    updated = letta.tools.update(tool.id, description="Roll some dice.")
    assert updated.description == "Roll some dice."
    assert updated.json_schema is not None and updated.json_schema["description"] == "Roll some dice."
    upserted = letta.tools.upsert(source_code=ROLL_DICE, tags=["v2"])
    assert upserted.id == tool.id
    assert upserted.tags == ["v2"]

    letta.tools.delete(tool.id)
    with pytest.raises(letta_client.NotFoundError):
        letta.tools.retrieve(tool.id)
    assert "roll_dice" not in {t.name for t in every(letta.tools.list())}


def test_agent_lifecycle(letta: Letta) -> None:
    dice = letta.tools.create(source_code=ROLL_DICE)
    shout = letta.tools.create(source_code=SHOUT)
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="ada",
        model=MODEL,
        memory_blocks=[
            {"label": "persona", "value": "I am Ada, a careful archivist.", "limit": 200},
            {"label": "human", "value": "The user likes birds."},
        ],
        tool_ids=[dice.id],
        tags=["demo"],
    )
    assert agent.id.startswith("agent-")
    assert agent.name == "ada"
    assert agent.model == MODEL
    assert agent.agent_type == "memgpt_v2_agent"
    assert agent.llm_config.model == "claude-3-5-haiku-20241022"
    # The wire's model_endpoint_type, which letta-client's model names api_model_endpoint_type.
    assert agent.llm_config.api_model_endpoint_type == "anthropic"
    assert agent.llm_config.context_window > 0
    assert [b.label for b in agent.blocks] == ["persona", "human"]
    assert [b.value for b in agent.memory.blocks] == ["I am Ada, a careful archivist.", "The user likes birds."]
    assert agent.blocks[0].limit == 200
    assert {t.name for t in agent.tools} == DEFAULT_TOOL_NAMES | {"roll_dice"}
    assert agent.tags == ["demo"]
    assert agent.message_ids is not None and len(agent.message_ids) == 4
    assert agent.system and "send_message" in agent.system

    fetched = letta.agents.retrieve(agent.id)
    assert (fetched.id, fetched.name, fetched.message_ids) == (agent.id, "ada", agent.message_ids)
    assert [b.id for b in fetched.blocks] == [b.id for b in agent.blocks]

    renamed = letta.agents.update(agent.id, name="ada2", system="You are Ada, version two.", tags=["x", "y"])
    assert renamed.name == "ada2"
    assert renamed.system == "You are Ada, version two."
    assert renamed.tags == ["x", "y"]
    assert letta.agents.retrieve(agent.id).name == "ada2"

    persona = letta.agents.blocks.retrieve("persona", agent_id=agent.id)
    assert persona.value == "I am Ada, a careful archivist."
    assert persona.label == "persona" and persona.limit == 200
    changed = letta.agents.blocks.update("persona", agent_id=agent.id, value="I am Ada, bold and brief.")
    assert changed.value == "I am Ada, bold and brief."
    assert changed.id == persona.id
    assert letta.agents.blocks.retrieve("persona", agent_id=agent.id).value == "I am Ada, bold and brief."
    with pytest.raises(letta_client.UnprocessableEntityError):
        letta.agents.blocks.update("persona", agent_id=agent.id, value="x" * 201)
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.blocks.retrieve("nope", agent_id=agent.id)
    assert [b.label for b in every(letta.agents.blocks.list(agent.id))] == ["persona", "human"]
    assert [b.label for b in every(letta.agents.blocks.list(agent.id, limit=1))] == ["persona", "human"]

    attached = letta.agents.tools.attach(shout.id, agent_id=agent.id)
    assert attached is not None
    assert "shout" in {t.name for t in attached.tools}
    agent_tools = every(letta.agents.tools.list(agent.id))
    assert {t.name for t in agent_tools} == DEFAULT_TOOL_NAMES | {"roll_dice", "shout"}
    assert [t.id for t in every(letta.agents.tools.list(agent.id, limit=2))] == [t.id for t in agent_tools]
    detached = letta.agents.tools.detach(dice.id, agent_id=agent.id)
    assert detached is not None
    assert {t.name for t in detached.tools} == DEFAULT_TOOL_NAMES | {"shout"}
    assert {t.name for t in letta.agents.retrieve(agent.id).tools} == DEFAULT_TOOL_NAMES | {"shout"}

    messages = every(letta.agents.messages.list(agent.id, order="asc"))
    assert [m.message_type for m in messages] == [
        "system_message",
        "reasoning_message",
        "assistant_message",
        "tool_return_message",
        "user_message",
    ]
    system = messages[0]
    assert isinstance(system, letta_client.types.agents.SystemMessage)
    assert system.content.startswith("You are Ada, version two.")
    assert "I am Ada, bold and brief." in system.content
    assistant = messages[2]
    assert isinstance(assistant, letta_client.types.agents.AssistantMessage)
    assert isinstance(assistant.content, str) and assistant.content
    tool_return = messages[3]
    assert isinstance(tool_return, letta_client.types.ToolReturnMessage)
    assert tool_return.status == "success"
    assert {m.id for m in messages} == set(agent.message_ids)
    # Small pages: the reasoning and assistant parts of one stored message share its id.
    assert [m.message_type for m in every(letta.agents.messages.list(agent.id, order="asc", limit=2))] == [
        m.message_type for m in messages
    ]
    # One page: as in Letta, `after` means newer, so the client's auto-paging (which passes the
    # last id as `after`) does not walk a newest-first listing; `before` does (see test_letta_client_lists).
    newest_first = letta.agents.messages.list(agent.id).items
    assert newest_first[0].message_type == "user_message"
    assert len(newest_first) == len(messages)

    letta.agents.delete(agent.id)
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.retrieve(agent.id)
    assert [a.id for a in every(letta.agents.list())] == []


def test_agents_list_paginates_to_the_end(letta: Letta) -> None:
    ids = [
        letta.agents.create(agent_type="memgpt_v2_agent", name=f"a{n}", model=MODEL, include_base_tools=False).id
        for n in range(7)
    ]
    assert [a.id for a in every(letta.agents.list())] == ids
    paged = every(letta.agents.list(limit=2))
    assert [a.id for a in paged] == ids
    page = letta.agents.list(limit=3)
    assert [a.id for a in page.items] == ids[:3]
    assert page.has_next_page()
    assert [a.name for a in every(letta.agents.list(name="a4"))] == ["a4"]
    newest = every(letta.agents.list(limit=3, order="desc"))
    assert [a.id for a in newest] == ids[::-1]


def test_blocks_create_retrieve_list_update_delete(letta: Letta) -> None:
    team = letta.blocks.create(label="team", value="We ship on Fridays.", limit=100, description="How we work")
    assert team.id.startswith("block-")
    assert (team.label, team.value, team.limit, team.description) == (
        "team",
        "We ship on Fridays.",
        100,
        "How we work",
    )
    notes = letta.blocks.create(label="notes", value="")
    fetched = letta.blocks.retrieve(team.id)
    assert (fetched.id, fetched.value, fetched.limit) == (team.id, "We ship on Fridays.", 100)

    assert [b.id for b in every(letta.blocks.list())] == [team.id, notes.id]
    assert [b.id for b in every(letta.blocks.list(label="notes"))] == [notes.id]
    assert [b.id for b in every(letta.blocks.list(limit=1))] == [team.id, notes.id]

    one = letta.agents.create(
        agent_type="memgpt_v2_agent", name="one", model=MODEL, block_ids=[team.id], include_base_tools=False
    )
    two = letta.agents.create(
        agent_type="memgpt_v2_agent", name="two", model=MODEL, block_ids=[team.id], include_base_tools=False
    )
    assert [a.id for a in every(letta.blocks.agents.list(team.id))] == [one.id, two.id]
    assert [a.name for a in every(letta.blocks.agents.list(team.id, limit=1))] == ["one", "two"]
    updated = letta.blocks.update(team.id, value="We ship on Mondays.")
    assert updated.value == "We ship on Mondays."
    assert letta.blocks.retrieve(team.id).value == "We ship on Mondays."
    for agent_id in (one.id, two.id):
        assert letta.agents.blocks.retrieve("team", agent_id=agent_id).value == "We ship on Mondays."
    with pytest.raises(letta_client.UnprocessableEntityError):
        letta.blocks.update(team.id, value="x" * 101)

    letta.blocks.delete(team.id)
    with pytest.raises(letta_client.NotFoundError):
        letta.blocks.retrieve(team.id)
    assert [b.id for b in every(letta.blocks.list())] == [notes.id]
    assert letta.agents.retrieve(one.id).blocks == []
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.blocks.retrieve("team", agent_id=two.id)


def test_unknown_ids_are_not_found(letta: Letta) -> None:
    with pytest.raises(letta_client.NotFoundError) as agent:
        letta.agents.retrieve("agent-00000000-0000-7000-8000-000000000000")
    assert agent.value.status_code == 404
    assert "agent-00000000-0000-7000-8000-000000000000" in str(agent.value)
    with pytest.raises(letta_client.NotFoundError):
        letta.tools.retrieve("tool-nope")
    with pytest.raises(letta_client.NotFoundError):
        letta.blocks.retrieve("block-nope")
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.delete("agent-nope")
    with pytest.raises(letta_client.NotFoundError):
        letta.tools.delete("tool-nope")
    with pytest.raises(letta_client.NotFoundError):
        letta.blocks.delete("block-nope")


def test_wrong_api_key_is_an_authentication_error(base_url: str) -> None:
    with Letta(base_url=base_url, api_key="not-the-password", max_retries=0) as wrong:
        with pytest.raises(letta_client.AuthenticationError) as refused:
            wrong.agents.list()
        assert refused.value.status_code == 401
        assert SERVER_PASSWORD not in str(refused.value)
    with Letta(base_url=base_url, api_key=SERVER_PASSWORD, max_retries=0) as right:
        right.agents.list()  # the password is a key too
