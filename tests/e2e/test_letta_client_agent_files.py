"""Agent Files through letta-client 1.7.0 against a live server: import, step, batch run, export."""

from __future__ import annotations

import json
import time
from itertools import islice
from typing import Any

import httpx
from letta_client import Letta

from support.agent_files import (
    SCREENING,
    SUPPORT_DESK,
    blocks_of,
    document,
    message_essence,
    rules,
    tools_of,
)


def _export(client: Letta, agent_id: str) -> dict[str, Any]:
    exported = json.loads(client.agents.export_file(agent_id))
    assert isinstance(exported, dict)
    return exported


def _check_kept(original: dict[str, Any], file_agent_id: str, exported: dict[str, Any]) -> None:
    """The exported agent has the original's blocks, tools, rules, messages and in-context window."""
    before = next(a for a in original["agents"] if a["id"] == file_agent_id)
    (after,) = exported["agents"]
    assert blocks_of(exported, after) == blocks_of(original, before)
    assert tools_of(exported, after) == tools_of(original, before)
    assert rules(after) == rules(before)
    count = len(before["messages"])
    assert [message_essence(m) for m in after["messages"][:count]] == [message_essence(m) for m in before["messages"]]
    # Calls and their results still pair up, through any id a provider would have refused.
    calls = [c["id"] for m in after["messages"][:count] for c in m["tool_calls"] or []]
    results = [m["tool_call_id"] for m in after["messages"][:count] if m["role"] == "tool"]
    assert set(results) <= set(calls)
    # The window: the original's (by position in the file), then what the steps added.
    position = {m["id"]: i for i, m in enumerate(before["messages"])}
    kept = [f"message-{position[i]}" for i in before["in_context_message_ids"]]
    assert after["in_context_message_ids"][: len(kept)] == kept
    added = [m["id"] for m in after["messages"][count:]]
    assert after["in_context_message_ids"][len(kept) :] == added
    system = after["messages"][position[before["in_context_message_ids"][0]]]
    assert before["system"] in system["content"][0]["text"]  # rebuilt by nightshift with the agent's memory
    assert all(value in system["content"][0]["text"] for _, value, *_ in blocks_of(original, before))


def test_agent_files_import_step_in_a_batch_run_and_export(letta: Letta, http: httpx.Client) -> None:
    with SUPPORT_DESK.open("rb") as handle:
        desk = letta.agents.import_file(file=("support_desk.af", handle)).agent_ids
    screening = letta.agents.import_file(
        file=("screening_workflow.af", SCREENING.read_bytes()), append_copy_suffix=False
    ).agent_ids
    assert len(desk) == 2 and len(screening) == 1
    tess_id, ark_id = desk
    (screener_id,) = screening
    shown = {i: http.get(f"/v1/agents/{i}").json() for i in (*desk, *screening)}
    assert [shown[i]["name"] for i in (tess_id, ark_id, screener_id)] == ["tess_copy", "ark_copy", "screener"]
    assert shown[tess_id]["model"] == "openai/gpt-4o-mini"
    # One block of the file shared by both agents is one block here too.
    company = {b["id"] for i in desk for b in shown[i]["blocks"] if b["label"] == "company"}
    assert len(company) == 1
    assert [s["key"] for s in shown[tess_id]["tool_exec_environment_variables"]] == ["ORDERS_API_KEY"]

    # A synchronous step of an imported agent, with its imported custom tool.
    response = letta.agents.messages.create(
        agent_id=tess_id, messages=[{"role": "user", "content": "Please use lookup_order for B-2"}]
    )
    calls = [m.tool_call.name for m in response.messages if m.message_type == "tool_call_message"]
    assert calls == ["lookup_order"]
    assert response.stop_reason.stop_reason == "end_turn"

    # A batch run over the three imported agents; the screener follows its chain of rules.
    run = letta.batches.create(
        requests=[
            {"agent_id": tess_id, "messages": [{"role": "user", "content": "Please use lookup_order for C-3"}]},
            {"agent_id": ark_id, "messages": [{"role": "user", "content": "Good morning"}]},
            {
                "agent_id": screener_id,
                "messages": [{"role": "user", "content": "Please use fetch_applicant for Ada Lovelace"}],
            },
        ]
    )
    deadline = time.monotonic() + 60
    while (current := letta.batches.retrieve(run.id)).status in ("created", "running"):
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    assert current.status == "completed"
    screened = list(islice(letta.batches.messages.list(run.id, agent_id=screener_id, order="asc"), 100))
    chain = [m.tool_calls[0].function.name for m in screened if m.role == "assistant" and m.tool_calls]
    assert chain == ["fetch_applicant", "score_applicant", "invite"]

    desk_file = document(SUPPORT_DESK)
    tess = _export(letta, tess_id)
    _check_kept(desk_file, "agent-0", tess)
    _check_kept(desk_file, "agent-1", _export(letta, ark_id))
    _check_kept(document(SCREENING), "agent-0", _export(letta, screener_id))
    assert tess["agents"][0]["tool_exec_environment_variables"] == {"ORDERS_API_KEY": ""}
    steps = tess["agents"][0]["messages"][len(desk_file["agents"][0]["messages"]) :]
    assert [m["role"] for m in steps[:3]] == ["user", "assistant", "tool"]

    # An export imports again (plain JSON this time) and exports the same.
    (again,) = letta.agents.import_file(file=("tess.af", json.dumps(tess).encode())).agent_ids
    twice = _export(letta, again)
    assert twice["agents"][0]["name"] == "tess_copy_copy"
    assert [message_essence(m) for m in twice["agents"][0]["messages"]] == [
        message_essence(m) for m in tess["agents"][0]["messages"]
    ]
    assert twice["agents"][0]["in_context_message_ids"] == tess["agents"][0]["in_context_message_ids"]
    assert twice["blocks"] == tess["blocks"] and twice["tools"] == tess["tools"]
    assert rules(twice["agents"][0]) == rules(tess["agents"][0])
