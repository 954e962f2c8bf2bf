"""letta-client 1.7.0's tool calls against a real server and the emulator: client schemas, tools whose
arguments are pydantic models, ``tools.search``, ``agents.tools.run`` and what a tool return carries."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from itertools import islice
from typing import Any

import httpx
import letta_client
import pytest
from letta_client import Letta
from letta_client.types.tool import BaseTool
from pydantic import BaseModel

from nightshift.emulator.config import ScriptedReply, ScriptedToolCall

MODEL = "anthropic/claude-3-5-haiku-20241022"


class InventoryItem(BaseModel):
    sku: str
    name: str
    price: float


class InventoryEntry(BaseModel):
    item: InventoryItem
    transaction_id: str


class InventoryEntryData(BaseModel):
    data: InventoryEntry
    quantity_change: int


class ManageInventoryTool(BaseTool):
    name: str = "manage_inventory"
    # letta-client types this as its own model base; users' models are plain pydantic ones, as here.
    args_schema: type[BaseModel] | None = InventoryEntryData  # type: ignore[assignment]
    description: str = "Update the inventory with a new entry."
    tags: list[str] = ["inventory"]  # noqa: RUF012 (a pydantic field default, copied per instance)

    def run(self, data: InventoryEntry, quantity_change: int) -> str:
        """Record an inventory change."""
        print(f"updating {data.item.sku}")
        kinds = f"{type(data).__name__}/{type(data.item).__name__}"
        return f"{kinds}: {data.item.name} x{quantity_change} at {data.item.price}"


class Restock(BaseModel):
    item: InventoryItem
    count: int = 1


def restock(item: InventoryItem, count: int = 1) -> str:
    """Order more of an item.

    Args:
        item: The item to order.
        count: How many to order.
    """
    return f"ordered {count} of {item.name} ({type(item).__name__})"


CHATTY = '''
import sys


def chatty(word: str) -> str:
    """Repeat a word many times, talking about it.

    Args:
        word: The word to repeat.
    """
    print(f"repeating {word}")
    print("careful", file=sys.stderr)
    return word * 50
'''

BROKEN = '''
def broken(order_id: str) -> str:
    """Look up an order in a system that is down.

    Args:
        order_id: The order's identifier.
    """
    raise ConnectionError(f"no route to the order system for {order_id}")
'''


@pytest.fixture
def served(letta: Letta, emulator: str) -> Iterator[tuple[Letta, httpx.Client]]:
    """letta-client on the module's server, its provider the emulator, and a client of the emulator's admin API."""
    with httpx.Client(base_url=f"{emulator}/_emulator") as admin:
        yield letta, admin


def _script(admin: httpx.Client, custom_id: str, *replies: ScriptedReply) -> None:
    body = {"custom_id": custom_id, "replies": [r.model_dump(mode="json") for r in replies]}
    admin.post("/script", json=body).raise_for_status()


def _call(name: str, **arguments: Any) -> ScriptedReply:
    return ScriptedReply(tool_call=ScriptedToolCall(name=name, arguments=arguments, request_heartbeat=True))


def _say(message: str) -> ScriptedReply:
    return ScriptedReply(tool_call=ScriptedToolCall(name="send_message", arguments={"message": message}))


ENTRY = {"item": {"sku": "W-1", "name": "Widget", "price": 2.5}, "transaction_id": "t-9"}


def test_tools_with_pydantic_arguments_run_in_a_sync_step_and_a_batch_run(served: tuple[Letta, httpx.Client]) -> None:
    letta, admin = served
    # letta-client 1.7.0 types BaseTool as a Tool, whose id is required; the server gives its own.
    managed = letta.tools.add(tool=ManageInventoryTool(id="local"))
    assert (managed.name, managed.description, managed.tags) == (
        "manage_inventory",
        "Update the inventory with a new entry.",
        ["inventory"],
    )
    assert managed.args_json_schema == InventoryEntryData.model_json_schema()
    assert managed.json_schema is not None
    parameters: Any = managed.json_schema["parameters"]
    # References are inlined for the providers: the model sees the nested fields themselves.
    assert "$defs" not in json.dumps(parameters) and "$ref" not in json.dumps(parameters)
    assert parameters["properties"]["data"]["properties"]["item"]["properties"]["price"]["type"] == "number"
    assert sorted(parameters["required"]) == ["data", "quantity_change"]
    restocking = letta.tools.upsert_from_function(func=restock, args_schema=Restock)
    assert restocking.description == "Order more of an item."
    assert letta.tools.upsert_from_function(func=restock, args_schema=Restock).id == restocking.id

    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="shopkeeper", model=MODEL, tool_ids=[managed.id, restocking.id]
    )
    _script(
        admin,
        "*",
        _call("manage_inventory", data=ENTRY, quantity_change=3),
        _call("restock", item=ENTRY["item"]),
        _say("done"),
    )
    response = letta.agents.messages.create(agent_id=agent.id, messages=[{"role": "user", "content": "restock"}])
    returns = [m for m in response.messages if m.message_type == "tool_return_message"]
    assert [(r.name, r.status) for r in returns] == [
        ("manage_inventory", "success"),
        ("restock", "success"),
        ("send_message", "success"),
    ]
    assert json.loads(returns[0].tool_return)["message"] == "InventoryEntry/InventoryItem: Widget x3 at 2.5"
    assert returns[0].stdout == ["updating W-1\n"]
    assert json.loads(returns[1].tool_return)["message"] == "ordered 1 of Widget (InventoryItem)"

    # The same in a batch run; arguments the model does not fill as the model wants are the tool's error.
    _script(
        admin,
        agent.id,
        _call(
            "manage_inventory", data={**ENTRY, "item": {"sku": "G-2", "name": "Gadget", "price": 4}}, quantity_change=-1
        ),
        _call("manage_inventory", data={"item": {"sku": "X"}}, quantity_change=1),
        _say("done again"),
    )
    run = letta.batches.create(requests=[{"agent_id": agent.id, "messages": [{"role": "user", "content": "again"}]}])
    deadline = time.monotonic() + 30
    while (current := letta.batches.retrieve(run.id)).status in ("created", "running"):
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    assert current.status == "completed"
    tools = [m for m in islice(letta.batches.messages.list(run.id, order="asc"), 100) if m.role == "tool"]
    results = [json.loads(m.content[0].text) for m in tools if m.content]  # type: ignore[union-attr]
    assert results[0]["message"] == "InventoryEntry/InventoryItem: Gadget x-1 at 4.0"
    assert results[1]["status"] == "Failed"
    assert results[1]["message"].startswith("Error executing function manage_inventory: ValidationError")


def test_client_schemas_are_checked(served: tuple[Letta, httpx.Client]) -> None:
    letta, _ = served
    schema: dict[str, object] = {
        "name": "chatty",
        "description": "Repeat a word (the client's words).",
        "parameters": {"type": "object", "properties": {"word": {"type": "string", "minLength": 1}}, "required": []},
    }
    tool = letta.tools.create(source_code=CHATTY, json_schema=schema)
    assert tool.json_schema == schema
    with pytest.raises(letta_client.UnprocessableEntityError) as bad:
        letta.tools.upsert(source_code=CHATTY, json_schema={**schema, "parameters": {"type": "string"}})
    assert "json_schema.parameters" in str(bad.value)
    with pytest.raises(letta_client.UnprocessableEntityError) as bad:
        letta.tools.upsert(
            source_code=CHATTY, json_schema={**schema, "parameters": {"type": "object", "properties": 3}}
        )
    assert "not a valid JSON Schema" in str(bad.value)

    fine = Restock.model_json_schema()
    source = "def restock(item, count=1):\n    '''Order more.'''\n    return 'ok'\n"
    for args_json_schema, says in [
        ({"type": "string"}, "must be an object schema"),
        ({**fine, "properties": {**fine["properties"], "colour": {"type": "string"}}}, "['colour']"),
        ({**fine, "required": ["item"], "properties": {"count": {"type": "integer"}}}, "['item'] of 'restock'"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Nowhere"}}}, "does not define"),
        (
            {
                "type": "object",
                "properties": {"item": {"$ref": "#/$defs/Node"}},
                "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
            },
            "contains itself",
        ),
    ]:
        with pytest.raises(letta_client.UnprocessableEntityError) as bad:
            letta.tools.create(source_code=source, args_json_schema=args_json_schema)
        assert says in str(bad.value), (says, str(bad.value))
    assert [t.name for t in letta.tools.list(name="restock")] == []


def test_tools_search(served: tuple[Letta, httpx.Client]) -> None:
    letta, _ = served
    letta.tools.create(source_code=CHATTY, tags=["words"])
    letta.tools.create(source_code=BROKEN, tags=["orders"])
    found = letta.tools.search(query="repeat a word")
    assert [r.tool.name for r in found][:1] == ["chatty"]
    assert found[0].combined_score == 1.0
    assert [r.tool.name for r in letta.tools.search(query="order", tags=["orders"])] == ["broken"]
    memory = letta.tools.search(query="memory block", tool_types=["letta_memory_core"], limit=3)
    assert len(memory) == 3 and all(r.tool.tool_type == "letta_memory_core" for r in memory)
    assert letta.tools.search(query="zebra") == []
    with pytest.raises(letta_client.UnprocessableEntityError):
        letta.tools.search(query="x", tool_types=["quantum"])


def test_agents_tools_run(served: tuple[Letta, httpx.Client]) -> None:
    letta, _ = served
    chatty = letta.tools.create(source_code=CHATTY)
    broken = letta.tools.create(source_code=BROKEN)
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent",
        name="runner",
        model=MODEL,
        tool_ids=[chatty.id, broken.id],
        tools=["memory_insert"],
        memory_blocks=[{"label": "human", "value": "Name: Ada"}],
    )

    ran = letta.agents.tools.run("chatty", agent_id=agent.id, args={"word": "ab"})
    assert (ran.status, ran.func_return, ran.stdout, ran.stderr) == (
        "success",
        "ab" * 50,
        ["repeating ab\n"],
        ["careful\n"],
    )
    failed = letta.agents.tools.run("broken", agent_id=agent.id, args={"order_id": "7"})
    assert failed.status == "error"
    assert failed.func_return == "Error executing function broken: ConnectionError: no route to the order system for 7"
    edited = letta.agents.tools.run(
        "memory_insert", agent_id=agent.id, args={"label": "human", "new_str": "Likes: tea"}
    )
    assert edited.status == "success"
    assert letta.agents.blocks.retrieve("human", agent_id=agent.id).value == "Name: Ada\nLikes: tea"
    refused = letta.agents.tools.run("memory_insert", agent_id=agent.id, args={"label": "pets", "new_str": "x"})
    assert refused.status == "error" and "no memory block labelled 'pets'" in str(refused.func_return)
    with pytest.raises(letta_client.NotFoundError):
        letta.agents.tools.run("restock", agent_id=agent.id, args={})


def test_tool_returns_carry_errors_truncation_notes_and_output(served: tuple[Letta, httpx.Client]) -> None:
    letta, admin = served
    chatty = letta.tools.create(source_code=CHATTY, return_char_limit=10)
    broken = letta.tools.create(source_code=BROKEN)
    agent = letta.agents.create(
        agent_type="memgpt_v2_agent", name="talker", model=MODEL, tool_ids=[chatty.id, broken.id]
    )
    _script(admin, "*", _call("chatty", word="hey"), _call("broken", order_id="12"), _say("sorry"))

    response = letta.agents.messages.create(agent_id=agent.id, messages=[{"role": "user", "content": "go"}])

    returns = [m for m in response.messages if m.message_type == "tool_return_message"]
    long, failed = returns[0], returns[1]
    assert long.status == "success"
    assert json.loads(long.tool_return)["message"] == (
        "heyheyheyh... [NOTE: function output was truncated since it exceeded the character limit (150 > 10)]"
    )
    assert (long.stdout, long.stderr) == (["repeating hey\n"], ["careful\n"])
    assert failed.status == "error"
    assert json.loads(failed.tool_return)["message"] == (
        "Error executing function broken: ConnectionError: no route to the order system for 12"
    )
    # The stored messages show the same fields.
    listed = [
        m for m in letta.agents.messages.list(agent_id=agent.id, limit=100) if m.message_type == "tool_return_message"
    ]
    assert any(m.stdout == ["repeating hey\n"] for m in listed)
