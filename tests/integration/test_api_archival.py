"""An agent's archival memory through HTTP (``/v1/agents/{id}/archival-memory``), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from support.api import MEMGPT, json_list, json_object
from support.clock import ManualClock

# Nothing here starts a batch run: the apps answer the same without a poller looking for work.
pytestmark = pytest.mark.settings(poller=False)

MODEL = "anthropic/claude-3-5-haiku-20241022"
# Every field of letta-client 1.7.0's Passage, and agent_id (Letta's older passages named it).
PASSAGE_FIELDS = {
    "id",
    "text",
    "agent_id",
    "archive_id",
    "tags",
    "metadata",
    "created_at",
    "updated_at",
    "embedding",
    "embedding_config",
    "is_deleted",
    "created_by_id",
    "last_updated_by_id",
    "file_id",
    "file_name",
    "source_id",
}


async def new_agent(client: httpx.AsyncClient, name: str = "keeper") -> str:
    agent = json_object(await client.post("/v1/agents/", json={"name": name, "model": MODEL, "agent_type": MEMGPT}))
    return str(agent["id"])


async def insert(client: httpx.AsyncClient, agent_id: str, text: str, **extra: Any) -> dict[str, Any]:
    """One passage inserted through the API (``extra``: tags, created_at)."""
    made = json_list(await client.post(f"/v1/agents/{agent_id}/archival-memory", json={"text": text, **extra}))
    assert len(made) == 1, made
    passage: dict[str, Any] = made[0]
    return passage


async def listed(client: httpx.AsyncClient, agent_id: str, **params: Any) -> list[str]:
    """The texts of a page of the agent's passages."""
    page = json_list(await client.get(f"/v1/agents/{agent_id}/archival-memory", params=params))
    return [p["text"] for p in page]


async def found(client: httpx.AsyncClient, agent_id: str, params: Any) -> list[str]:
    """The texts the search endpoint finds, best first (``params``: a dict or a list of pairs)."""
    answer = json_object(await client.get(f"/v1/agents/{agent_id}/archival-memory/search", params=params))
    assert answer["count"] == len(answer["results"])
    return [r["content"] for r in answer["results"]]


async def test_a_passage_is_saved_and_listed_in_lettas_shape(client: httpx.AsyncClient, clock: ManualClock) -> None:
    agent_id = await new_agent(client)
    before = clock.now()  # the server's time, not the machine's
    passage = await insert(client, agent_id, "The user's cat is called Miso.", tags=["pets", "cats", "pets"])
    assert set(passage) == PASSAGE_FIELDS
    assert passage["id"].startswith("passage-")
    assert passage["agent_id"] == agent_id
    assert passage["tags"] == ["pets", "cats"]  # a repeated tag is kept once
    assert (passage["embedding"], passage["embedding_config"], passage["archive_id"]) == (None, None, None)
    assert passage["metadata"] == {} and passage["is_deleted"] is False
    created = datetime.fromisoformat(passage["created_at"])
    assert before <= created <= clock.now()
    assert passage["updated_at"] == passage["created_at"]

    page = json_list(await client.get(f"/v1/agents/{agent_id}/archival-memory"))
    assert page == [passage]
    # Without tags, a passage has none; the text is kept as given.
    plain = await insert(client, agent_id, "  Spaces around are kept.  ")
    assert (plain["tags"], plain["text"]) == ([], "  Spaces around are kept.  ")


async def test_listing_pages_both_ways_by_creation_time(client: httpx.AsyncClient) -> None:
    agent_id = await new_agent(client)
    texts = [f"note {n}" for n in range(5)]
    for text in texts:
        await insert(client, agent_id, text)
    # Backdated: the oldest passage, though inserted last.
    await insert(client, agent_id, "an old memory", created_at="2020-05-01T12:00:00+02:00")
    oldest_first = ["an old memory", *texts]
    assert await listed(client, agent_id) == oldest_first
    assert await listed(client, agent_id, ascending="false") == oldest_first[::-1]
    assert await listed(client, agent_id, order="desc") == oldest_first[::-1]

    ids = [p["id"] for p in json_list(await client.get(f"/v1/agents/{agent_id}/archival-memory"))]
    by_id = dict(zip(ids, oldest_first, strict=True))

    async def walk(**params: Any) -> list[str]:
        """Every passage, a page of two at a time, each page after the last one's last passage."""
        seen: list[str] = []
        cursor: dict[str, str] = {}
        while True:
            url = f"/v1/agents/{agent_id}/archival-memory"
            page = json_list(await client.get(url, params={"limit": 2, **params, **cursor}))
            if not page:
                return seen
            assert len(page) <= 2
            seen.extend(p["text"] for p in page)
            cursor = {"after": page[-1]["id"]}

    assert await walk() == oldest_first
    assert await walk(ascending="false") == oldest_first[::-1]
    # before: the passages just before the cursor in the listing's order, shown in that order.
    assert await listed(client, agent_id, before=ids[4], limit=2) == [by_id[ids[2]], by_id[ids[3]]]
    assert await listed(client, agent_id, before=ids[1], ascending="false") == [by_id[i] for i in ids[:1:-1]]
    assert await listed(client, agent_id, after=ids[0], before=ids[3]) == [by_id[ids[1]], by_id[ids[2]]]
    # A cursor that is none of the agent's passages: an empty page, whatever the order.
    assert await listed(client, agent_id, after="passage-unknown") == []
    assert await listed(client, agent_id, before="passage-unknown", ascending="false") == []


async def test_listing_with_search_keeps_the_matching_passages_in_order(client: httpx.AsyncClient) -> None:
    agent_id = await new_agent(client)
    for text in ("Birds sing at dawn.", "The user hates mornings.", "A bird nested on the balcony.", "Tea at five."):
        await insert(client, agent_id, text)
    # The full-text search of archival_memory_search: any word, stemmed ("birds" finds "bird" too).
    assert await listed(client, agent_id, search="birds") == ["Birds sing at dawn.", "A bird nested on the balcony."]
    assert await listed(client, agent_id, search="birds tea", ascending="false") == [
        "Tea at five.",
        "A bird nested on the balcony.",
        "Birds sing at dawn.",
    ]
    matching = json_list(await client.get(f"/v1/agents/{agent_id}/archival-memory", params={"search": "bird"}))
    after_first = await listed(client, agent_id, search="bird", after=matching[0]["id"])
    assert after_first == ["A bird nested on the balcony."]
    before_last = await listed(client, agent_id, search="bird", before=matching[1]["id"])
    assert before_last == ["Birds sing at dawn."]
    assert await listed(client, agent_id, search="penguin") == []
    assert await listed(client, agent_id, search="?!") == []  # no words: nothing matches
    assert len(await listed(client, agent_id, search="")) == 4  # an empty search is no search


async def test_search_ranks_and_filters_by_tags_and_time(client: httpx.AsyncClient) -> None:
    agent_id = await new_agent(client)
    now = datetime.now(UTC)
    day = timedelta(days=1)
    await insert(client, agent_id, "Garden: roses need water.", tags=["garden"], created_at=(now - 3 * day).isoformat())
    await insert(
        client,
        agent_id,
        "Garden: water the roses, water the tomatoes, water everything.",
        tags=["garden", "chores"],
        created_at=(now - 2 * day).isoformat(),
    )
    await insert(client, agent_id, "Kitchen: the water filter is new.", tags=["kitchen"], created_at=now.isoformat())
    await insert(client, agent_id, "Nothing to do with it.", tags=["garden"])

    everything = await found(client, agent_id, {"query": "water", "top_k": 10})
    assert len(everything) == 3
    assert everything[0] == "Garden: water the roses, water the tomatoes, water everything."  # the most mentions
    assert await found(client, agent_id, {"query": "water", "top_k": 1}) == everything[:1]
    # By default as many as the archival_memory_search tool's page (5).
    for n in range(6):
        await insert(client, agent_id, f"water note {n}")
    assert len(await found(client, agent_id, {"query": "water"})) == 5

    tagged = await found(client, agent_id, [("query", "water"), ("tags", "garden"), ("tags", "kitchen")])
    assert sorted(tagged) == sorted(everything)
    both = [("query", "water"), ("tags", "garden"), ("tags", "chores"), ("tag_match_mode", "all")]
    assert await found(client, agent_id, both) == [everything[0]]
    assert await found(client, agent_id, [("query", "water"), ("tags", "none")]) == []
    # Both ends of the time range are kept; a time without a zone is UTC.
    since = (now - 2 * day).isoformat()
    recent = await found(client, agent_id, {"query": "garden kitchen", "start_datetime": since})
    assert sorted(recent) == sorted([everything[0], "Kitchen: the water filter is new."])
    until = (now - 2 * day).replace(tzinfo=None).isoformat()
    old = await found(client, agent_id, {"query": "garden kitchen", "end_datetime": until})
    assert sorted(old) == ["Garden: roses need water.", everything[0]]
    window = {"query": "garden", "start_datetime": since, "end_datetime": since, "tags": "chores"}
    assert await found(client, agent_id, window) == [everything[0]]

    answer = json_object(await client.get(f"/v1/agents/{agent_id}/archival-memory/search", params={"query": "roses"}))
    assert answer["count"] == 2
    first = answer["results"][0]
    assert set(first) == {"id", "content", "timestamp", "tags"}
    assert first["id"].startswith("passage-") and first["tags"]
    assert datetime.fromisoformat(first["timestamp"]).tzinfo is not None
    assert await found(client, agent_id, {"query": "?!"}) == []  # no words: nothing found


async def test_the_api_sees_what_the_base_tools_wrote_and_the_tools_see_the_api(client: httpx.AsyncClient) -> None:
    agent_id = await new_agent(client)

    async def run(tool: str, **args: Any) -> Any:
        """What the base tool returns (the search tool's JSON comes back decoded)."""
        ran = json_object(await client.post(f"/v1/agents/{agent_id}/tools/{tool}/run", json={"args": args}))
        assert ran["status"] == "success", ran
        return ran["func_return"]

    await run("archival_memory_insert", content="The user's sister lives in Lisbon.")
    await insert(client, agent_id, "Lisbon trip planned for May.", tags=["travel"])
    (saved, posted) = json_list(await client.get(f"/v1/agents/{agent_id}/archival-memory"))
    assert (saved["text"], saved["tags"], saved["agent_id"]) == ("The user's sister lives in Lisbon.", [], agent_id)
    assert posted["text"] == "Lisbon trip planned for May."
    assert sorted(await found(client, agent_id, {"query": "lisbon"})) == sorted([saved["text"], posted["text"]])
    tool_found = await run("archival_memory_search", query="lisbon")
    assert sorted(r["content"] for r in tool_found["results"]) == sorted([saved["text"], posted["text"]])


async def test_deleting_a_passage(client: httpx.AsyncClient) -> None:
    agent_id = await new_agent(client)
    kept = await insert(client, agent_id, "Keep: the user's birthday is in June.")
    gone = await insert(client, agent_id, "Forget: the user's old address.")
    url = f"/v1/agents/{agent_id}/archival-memory/{gone['id']}"
    assert json_object(await client.delete(url)) == {"message": f"Memory id={gone['id']} successfully deleted"}
    assert await listed(client, agent_id) == [kept["text"]]
    assert await found(client, agent_id, {"query": "user"}) == [kept["text"]]  # gone from the search too
    again = json_object(await client.delete(url), 404)
    assert again["detail"] == f"passage {gone['id']} not found in agent {agent_id}'s archival memory"


async def test_other_agents_and_organizations_passages_are_404(
    client: httpx.AsyncClient, other_org: httpx.AsyncClient
) -> None:
    agent_id = await new_agent(client)
    sibling = await new_agent(client, "sibling")
    passage = await insert(client, agent_id, "Private: the door code is 4321.")
    outsider = await new_agent(other_org, "outsider")

    hidden: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", f"/v1/agents/{agent_id}/archival-memory", None),
        ("POST", f"/v1/agents/{agent_id}/archival-memory", {"text": "planted"}),
        ("GET", f"/v1/agents/{agent_id}/archival-memory/search?query=door", None),
        ("DELETE", f"/v1/agents/{agent_id}/archival-memory/{passage['id']}", None),
    ]
    for method, path, body in hidden:
        response = await other_org.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["detail"] == f"agent {agent_id} not found"
    # Another agent's passage, through one's own agent: not there (in either organization).
    for http, owner in ((client, sibling), (other_org, outsider)):
        response = await http.delete(f"/v1/agents/{owner}/archival-memory/{passage['id']}")
        assert response.status_code == 404, response.text
        assert await listed(http, owner, after=passage["id"]) == []
        assert await found(http, owner, {"query": "door"}) == []
    unknown = await client.get("/v1/agents/agent-unknown/archival-memory")
    assert (unknown.status_code, unknown.json()["detail"]) == (404, "agent agent-unknown not found")
    # Nothing of the attempts reached the agent's memory.
    assert await listed(client, agent_id) == [passage["text"]]


# Bad bodies of POST .../archival-memory: (body, the field at fault, what the message says).
BAD_BODIES: list[tuple[dict[str, Any], str, str]] = [
    ({"text": ""}, "text", "at least 1 character"),
    ({"text": " \n\t"}, "text", "text is empty"),
    ({"text": "a\u0000b"}, "text", "NUL"),
    ({}, "text", "Field required"),
    ({"text": "ok", "tags": ["a\u0000"]}, "tags.0", "NUL"),
    ({"text": "ok", "tags": [str(n) for n in range(101)]}, "tags", "at most 100"),
    ({"text": "ok", "tags": ["x" * 256]}, "tags.0", "at most 255"),
    ({"text": "ok", "created_at": "yesterday"}, "created_at", "valid datetime"),
    ({"text": "ok", "created_at": "0001-01-01T00:00:00+05:00"}, "created_at", "outside the years 1 to 9999"),
]
# Bad query parameters of the listing ("") and the search: (path, params, field, what the message says).
BAD_QUERIES: list[tuple[str, dict[str, Any], str, str]] = [
    ("", {"limit": 0}, "query.limit", "greater than or equal to 1"),
    ("", {"limit": 1001}, "query.limit", "less than or equal to 1000"),
    ("", {"ascending": "maybe"}, "query.ascending", "valid boolean"),
    ("", {"order": "up"}, "query.order", "'asc' or 'desc'"),
    ("", {"after": "passage-\u0000"}, "query.after", "NUL"),
    ("/search", {}, "query.query", "Field required"),
    ("/search", {"query": ""}, "query.query", "at least 1 character"),
    ("/search", {"query": "x", "top_k": 0}, "query.top_k", "greater than or equal to 1"),
    ("/search", {"query": "x", "tag_match_mode": "some"}, "query.tag_match_mode", "'any' or 'all'"),
    ("/search", {"query": "x", "start_datetime": "soon"}, "query.start_datetime", "valid datetime"),
    (
        "/search",
        {"query": "x", "end_datetime": "9999-12-31T23:00:00-05:00"},
        "query.end_datetime",
        "outside the years 1 to 9999",
    ),
    (
        "/search",
        {"query": "x", "start_datetime": "2025-02-01", "end_datetime": "2025-01-01"},
        "start_datetime",
        "start_datetime is after end_datetime",
    ),
]


async def test_bad_input_is_422_naming_the_field(client: httpx.AsyncClient) -> None:
    agent_id = await new_agent(client)
    url = f"/v1/agents/{agent_id}/archival-memory"
    for body, field, says in BAD_BODIES:
        refused = json_object(await client.post(url, json=body), 422)
        assert (refused["field"], says in refused["detail"]) == (field, True), (body, refused)
    for path, params, field, says in BAD_QUERIES:
        refused = json_object(await client.get(url + path, params=params), 422)
        assert (refused["field"], says in refused["detail"]) == (field, True), (params, refused)
    assert await listed(client, agent_id) == []  # nothing of the refused bodies was written
