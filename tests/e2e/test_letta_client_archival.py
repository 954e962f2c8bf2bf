"""Letta's client (1.7.0) on an agent's archival memory: ``agents.passages`` create, list, search and
delete, and what the base tool ``archival_memory_insert`` wrote, as the API lists and searches it. A
module's server (``tests/e2e/conftest.py``) on SQLite and PostgreSQL, each test in an organization of its own.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import letta_client
import pytest
from letta_client import Letta
from letta_client.types import Passage
from letta_client.types.agents.passage_search_response import PassageSearchResponse

MODEL = "anthropic/claude-3-5-haiku-20241022"


class Passages:
    """``letta.agents.passages``, whose every method the client marks deprecated (Letta's newer
    archives API replaces them): each call here expects that warning, the call itself is the client's."""

    def __init__(self, letta: Letta) -> None:
        self._passages = letta.agents.passages

    def create(self, agent_id: str, **kwargs: Any) -> list[Passage]:
        with pytest.warns(DeprecationWarning):
            return self._passages.create(agent_id, **kwargs)

    def list(self, agent_id: str, **kwargs: Any) -> list[Passage]:
        with pytest.warns(DeprecationWarning):
            return self._passages.list(agent_id, **kwargs)

    def search(self, agent_id: str, **kwargs: Any) -> PassageSearchResponse:
        with pytest.warns(DeprecationWarning):
            return self._passages.search(agent_id, **kwargs)

    def delete(self, memory_id: str, *, agent_id: str) -> object:
        with pytest.warns(DeprecationWarning):
            return self._passages.delete(memory_id, agent_id=agent_id)


def texts(passages: list[Passage]) -> list[str]:
    return [p.text for p in passages]


def test_passages_through_lettas_client(letta: Letta) -> None:
    passages = Passages(letta)
    agent = letta.agents.create(agent_type="memgpt_v2_agent", name="archivist", model=MODEL)
    now = datetime.now(UTC)
    (first,) = passages.create(agent.id, text="The user grows basil on the balcony.", tags=["garden"])
    assert isinstance(first, Passage)
    assert first.id is not None and first.id.startswith("passage-")
    assert (first.text, first.tags, first.embedding, first.metadata) == (
        "The user grows basil on the balcony.",
        ["garden"],
        None,
        {},
    )
    assert first.created_at is not None and abs(first.created_at - now) < timedelta(minutes=1)
    # Backdated with a datetime, as the client sends it (ISO 8601).
    passages.create(
        agent.id, text="Basil seeds bought in spring.", tags=["garden", "shopping"], created_at=now - timedelta(days=30)
    )
    passages.create(agent.id, text="The user's bike needs a new chain.", tags=["chores"])

    oldest_first = [
        "Basil seeds bought in spring.",
        "The user grows basil on the balcony.",
        "The user's bike needs a new chain.",
    ]
    listed = passages.list(agent.id)
    assert texts(listed) == oldest_first
    assert texts(passages.list(agent.id, ascending=False)) == oldest_first[::-1]
    assert texts(passages.list(agent.id, limit=1, after=listed[0].id)) == oldest_first[1:2]
    assert texts(passages.list(agent.id, before=listed[2].id, ascending=True)) == oldest_first[:2]
    assert texts(passages.list(agent.id, search="basil")) == oldest_first[:2]

    found = passages.search(agent.id, query="basil")
    assert isinstance(found, PassageSearchResponse)
    assert found.count == 2 and {r.content for r in found.results} == set(oldest_first[:2])
    assert {r.id for r in found.results} == {listed[0].id, listed[1].id}
    shopping = passages.search(agent.id, query="basil", tags=["garden", "shopping"], tag_match_mode="all")
    assert [r.content for r in shopping.results] == ["Basil seeds bought in spring."]
    assert shopping.results[0].tags == ["garden", "shopping"]
    recent = passages.search(agent.id, query="basil", start_datetime=now - timedelta(days=1), top_k=5)
    assert [r.content for r in recent.results] == ["The user grows basil on the balcony."]
    older = passages.search(agent.id, query="basil", end_datetime=now - timedelta(days=1))
    assert [r.content for r in older.results] == ["Basil seeds bought in spring."]

    deleted = passages.delete(listed[2].id or "", agent_id=agent.id)
    assert deleted == {"message": f"Memory id={listed[2].id} successfully deleted"}
    assert texts(passages.list(agent.id)) == oldest_first[:2]
    with pytest.raises(letta_client.NotFoundError):
        passages.delete(listed[2].id or "", agent_id=agent.id)
    with pytest.raises(letta_client.NotFoundError):
        passages.list("agent-nope")
    with pytest.raises(letta_client.UnprocessableEntityError):
        passages.create(agent.id, text="   ")


def test_what_the_base_tool_saved_is_listed_and_searched(letta: Letta) -> None:
    passages = Passages(letta)
    agent = letta.agents.create(agent_type="memgpt_v2_agent", name="note-taker", model=MODEL)
    for note in ("The user's dentist is Dr. Okafor.", "The user prefers appointments on Tuesdays."):
        ran = letta.agents.tools.run("archival_memory_insert", agent_id=agent.id, args={"content": note})
        assert ran.status == "success", ran
    passages.create(agent.id, text="Dentist appointment booked for a Tuesday.", tags=["health"])

    listed = passages.list(agent.id)
    assert texts(listed) == [
        "The user's dentist is Dr. Okafor.",
        "The user prefers appointments on Tuesdays.",
        "Dentist appointment booked for a Tuesday.",
    ]
    assert [p.tags for p in listed] == [[], [], ["health"]]
    found = passages.search(agent.id, query="dentist")
    assert sorted(r.content for r in found.results) == sorted([listed[0].text, listed[2].text])
    # The tool's own search finds the same passages.
    searched = letta.agents.tools.run("archival_memory_search", agent_id=agent.id, args={"query": "dentist"})
    assert searched.status == "success", searched
    assert isinstance(searched.func_return, dict)
    assert sorted(r["content"] for r in searched.func_return["results"]) == sorted(r.content for r in found.results)
