"""Every list route that pages, walked page by page as Letta's clients walk it: each item once, in order.

letta-client's auto-paging iterator (Python 1.7.0, here) asks for the next page with the same
``order`` and ``limit`` and one cursor: ``after=<the page's last id>`` when the first request had
no ``before``, else ``before=<the page's first id>``; it stops at an empty page. Python 1.12.1
(``letta_client/pagination.py``, ``SyncArrayPage.next_page_info`` and
``SyncObjectPage.next_page_info``, unchanged from 1.7.0) and TypeScript 1.12.1
(``core/pagination.js``, ``ArrayPage.nextPageRequestOptions`` and
``ObjectPage.nextPageRequestOptions``: ``before`` present in the query means backwards) send the
same requests; they cannot be installed beside 1.7.0, so :func:`replay` sends those requests
over plain HTTP (1.12.1 has no ``batches`` resource: the batch lists are walked by 1.7.0 and by
the same requests). Letta documents the cursors as ids "in the specified sort order", which is
what makes these walks end with every item seen once.

The module's server (``tests/e2e/conftest.py``) on SQLite and PostgreSQL, the emulator behind it;
each walk in an organization of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any

import httpx
import pytest
from letta_client import Letta
from letta_client.types.message_create_param import MessageCreateParam

from nightshift.emulator.config import ScriptedReply, ScriptedToolCall

MODEL = "anthropic/claude-3-5-haiku-20241022"
COUNT = 14  # items of each list: three full pages and a part
PAGE = 4
ORDERS = ("asc", "desc")

# An item as the walks compare them: its id, and its Letta message type where one stored message
# is shown as several (a reasoning and an assistant message share the stored message's id).
Key = tuple[str, str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Filled:
    """A list made to hold ``COUNT`` items or more.

    ``path`` is its route; ``made`` the ids this test created, oldest first (the list may hold
    others, base tools say); ``pages`` letta-client 1.7.0's list method, or None where it does
    not page (archival passages: a plain list, though the route takes cursors); ``field`` the
    key of the items in the route's JSON object, None for a JSON list; ``order`` how the route
    takes the order, when not as ``order``.
    """

    path: str
    made: list[str]
    pages: Callable[..., Any] | None
    field: str | None = None
    order: Callable[[str], dict[str, Any]] = lambda order: {"order": order}


def key_of(item: Any) -> Key:
    if isinstance(item, dict):
        return (item["id"], item.get("message_type"))
    return (item.id, getattr(item, "message_type", None))


def keys(items: Iterable[Any]) -> list[Key]:
    return [key_of(item) for item in items]


def wait_for_batch(letta: Letta, run_id: str) -> None:
    deadline = time.monotonic() + 60
    while (run := letta.batches.retrieve(run_id)).status in ("created", "running"):
        assert time.monotonic() < deadline, run
        time.sleep(0.05)
    assert run.status == "completed", run


def agents(letta: Letta, count: int, **extra: Any) -> list[str]:
    return [
        letta.agents.create(
            agent_type="memgpt_v2_agent", name=f"agent-{n}", model=MODEL, include_base_tools=False, **extra
        ).id
        for n in range(count)
    ]


TOOL = '''
def tool_{n}(word: str) -> str:
    """Say the word back.

    Args:
        word: A word.
    """
    return word
'''


def tool_source(n: int) -> str:
    return TOOL.replace("{n}", str(n))


def fill_agent_messages(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    notes: list[MessageCreateParam] = [{"role": "user", "content": f"note {n}"} for n in range(COUNT - 1)]
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="talker",
        model=MODEL,
        include_base_tools=False,
        initial_message_sequence=notes,
    )
    made = list(agent.message_ids or ())
    assert len(made) == COUNT  # the system message and the notes
    return Filled(
        path=f"/v1/agents/{agent.id}/messages", made=made, pages=lambda **q: letta.agents.messages.list(agent.id, **q)
    )


def fill_agents(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    return Filled(path="/v1/agents/", made=agents(letta, COUNT), pages=letta.agents.list)


def fill_blocks(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    made = [letta.blocks.create(label=f"notes-{n}", value=f"note {n}").id for n in range(COUNT)]
    return Filled(path="/v1/blocks/", made=made, pages=letta.blocks.list)


def fill_block_agents(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    block = letta.blocks.create(label="shared", value="everyone reads this")
    made = agents(letta, COUNT, block_ids=[block.id])
    return Filled(
        path=f"/v1/blocks/{block.id}/agents", made=made, pages=lambda **q: letta.blocks.agents.list(block.id, **q)
    )


def fill_agent_blocks(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    made = [letta.blocks.create(label=f"notes-{n}", value=f"note {n}").id for n in range(COUNT)]
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="rememberer", model=MODEL, include_base_tools=False, block_ids=made
    )
    return Filled(
        path=f"/v1/agents/{agent.id}/core-memory/blocks",
        made=made,
        pages=lambda **q: letta.agents.blocks.list(agent.id, **q),
    )


def fill_tools(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    made = [letta.tools.create(source_code=tool_source(n)).id for n in range(COUNT)]
    return Filled(path="/v1/tools/", made=made, pages=letta.tools.list)


def fill_agent_tools(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    made = [letta.tools.create(source_code=tool_source(n)).id for n in range(COUNT)]
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="handy", model=MODEL, include_base_tools=False, tool_ids=made
    )
    return Filled(
        path=f"/v1/agents/{agent.id}/tools", made=made, pages=lambda **q: letta.agents.tools.list(agent.id, **q)
    )


def fill_runs(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    (agent,) = agents(letta, 1)
    made = []
    for n in range(COUNT):
        letta.agents.messages.create(agent, messages=[{"role": "user", "content": f"hello {n}"}])
        made.append(letta.runs.list(agent_id=agent, limit=1, order="desc").items[0].id)
    return Filled(path="/v1/runs", made=made, pages=letta.runs.list)


def send_message(text: str, *, heartbeat: bool) -> ScriptedReply:
    call = ScriptedToolCall(name="send_message", arguments={"message": text}, request_heartbeat=heartbeat)
    return ScriptedReply(tool_call=call)


def _long_run(letta: Letta, emulator: str) -> str:
    """The id of a send of ``COUNT`` steps: ``send_message`` asking for a heartbeat, then a last
    one that does not."""
    agent = letta.agents.create(agent_type="memgpt_v2_agent", name="chatty", model=MODEL).id
    turns = [send_message(f"part {n}", heartbeat=n + 1 < COUNT) for n in range(COUNT)]
    body = {"custom_id": "*", "replies": [t.model_dump(mode="json") for t in turns]}
    httpx.post(f"{emulator}/_emulator/script", json=body, timeout=30).raise_for_status()
    response = letta.agents.messages.create(agent, messages=[{"role": "user", "content": "go"}], max_steps=COUNT + 5)
    assert response.usage.step_count == COUNT
    return letta.runs.list(agent_id=agent, limit=1).items[0].id


def fill_run_messages(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    run_id = _long_run(letta, emulator)
    return Filled(path=f"/v1/runs/{run_id}/messages", made=[], pages=lambda **q: letta.runs.messages.list(run_id, **q))


def fill_run_steps(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    run_id = _long_run(letta, emulator)
    return Filled(path=f"/v1/runs/{run_id}/steps", made=[], pages=lambda **q: letta.runs.steps.list(run_id, **q))


def fill_batches(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    made = [
        letta.batches.create(requests=[{"agent_id": agent, "messages": [{"role": "user", "content": "hi"}]}]).id
        for agent in agents(letta, COUNT)
    ]
    return Filled(path="/v1/messages/batches", made=made, pages=letta.batches.list)


def fill_batch_messages(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    many: list[MessageCreateParam] = [{"role": "user", "content": f"line {n}"} for n in range(COUNT)]
    run = letta.batches.create(requests=[{"agent_id": agent, "messages": many} for agent in agents(letta, 2)])
    wait_for_batch(letta, run.id)
    return Filled(
        path=f"/v1/messages/batches/{run.id}/messages",
        made=[],
        pages=lambda **q: letta.batches.messages.list(run.id, **q),
        field="messages",
    )


def fill_passages(letta: Letta, http: httpx.Client, emulator: str) -> Filled:
    (agent,) = agents(letta, 1)
    # (over HTTP: the client marks its passages methods deprecated)
    path = f"/v1/agents/{agent}/archival-memory"
    made = [http.post(path, json={"text": f"fact {n}"}).raise_for_status().json()[0]["id"] for n in range(COUNT)]
    return Filled(
        path=path,
        made=made,
        pages=None,
        order=lambda order: {"ascending": order == "asc"},
    )


LISTS: dict[str, Callable[[Letta, httpx.Client, str], Filled]] = {
    "agent messages": fill_agent_messages,
    "agents": fill_agents,
    "blocks": fill_blocks,
    "block agents": fill_block_agents,
    "agent blocks": fill_agent_blocks,
    "tools": fill_tools,
    "agent tools": fill_agent_tools,
    "runs": fill_runs,
    "run messages": fill_run_messages,
    "run steps": fill_run_steps,
    "batches": fill_batches,
    "batch messages": fill_batch_messages,
    "archival passages": fill_passages,
}


def whole(http: httpx.Client, filled: Filled, order: str) -> list[Key]:
    """The list in one page: what every walk must come to."""
    response = http.get(filled.path, params={**filled.order(order), "limit": 1000})
    assert response.status_code == 200, response.text
    body = response.json()
    return keys(body if filled.field is None else body[filled.field])


def replay(http: httpx.Client, filled: Filled, order: str, bound: int, *, before: str | None = None) -> list[Key]:
    """The items letta-client 1.12.1 (Python or TypeScript) yields, by the requests it sends.

    Each next page: the same query with ``after`` = the last item's id (or, when the first query
    had ``before``, ``before`` = the first item's id), until a page is empty.
    """
    query: dict[str, Any] = {**filled.order(order), "limit": PAGE}
    if before is not None:
        query["before"] = before
    seen: list[Key] = []
    for _ in range(bound):  # a walk that never ends fails the test rather than hanging it
        response = http.get(filled.path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        items = body if filled.field is None else body[filled.field]
        if not items:
            return seen
        seen += keys(items)
        if before is None:
            query["after"] = items[-1]["id"]
        else:
            query["before"] = items[0]["id"]
    return seen


def client_walk(filled: Filled, order: str, bound: int, *, before: str | None = None) -> list[Key]:
    """The items letta-client 1.7.0's iterator yields (``bound`` at most)."""
    assert filled.pages is not None
    query: dict[str, Any] = {**filled.order(order), "limit": PAGE}
    if before is not None:
        query["before"] = before
    return keys(islice(filled.pages(**query), bound))


def backwards(listed: list[Key]) -> list[Key]:
    """What a walk from ``before`` = the last item yields: the pages before it, nearest first,
    each in the list's order. A page holds ``PAGE`` stored items; the parts one stored message is
    shown as stay together (they share its id)."""
    units: list[list[Key]] = []
    for item in listed:
        if units and units[-1][0][0] == item[0]:
            units[-1].append(item)
        else:
            units.append([item])
    walked: list[Key] = []
    end = len(units) - 1
    while end > 0:
        walked += [item for unit in units[max(0, end - PAGE) : end] for item in unit]
        end -= PAGE
    return walked


@pytest.mark.parametrize("name", list(LISTS))
def test_every_list_pages_through_each_item_once(name: str, letta: Letta, http: httpx.Client, emulator: str) -> None:
    filled = LISTS[name](letta, http, emulator)
    for order in ORDERS:
        listed = whole(http, filled, order)
        assert len(set(listed)) == len(listed), (order, listed)
        ids = list(dict.fromkeys(item_id for item_id, _ in listed))  # a stored item's parts are adjacent
        assert len(ids) >= COUNT, (order, listed)
        assert ids == sorted(ids, reverse=order == "desc"), order  # ids sort in creation order
        created = filled.made if order == "asc" else filled.made[::-1]
        assert [i for i in ids if i in set(filled.made)] == created, order
        last = ids[-1]
        back = backwards(listed)
        assert len(back) >= COUNT - 1
        bound = 4 * len(listed)
        if filled.pages is not None:
            assert client_walk(filled, order, bound) == listed, f"letta-client 1.7.0, order={order}"
            assert client_walk(filled, order, bound, before=last) == back, f"1.7.0 from before, order={order}"
        assert replay(http, filled, order, bound) == listed, f"1.12.1's requests, order={order}"
        assert replay(http, filled, order, bound, before=last) == back, f"1.12.1's from before, order={order}"
