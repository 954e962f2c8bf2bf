"""One batch run of 300 agents on Anthropic, OpenAI and Gemini, through the emulator's three APIs.

A third of the agents on each provider; on each, a third look up three things with a custom tool
(several calls in one turn), a third have the user's facts kept in memory (several memory edits
in one turn), a third just answer. Each step submits one provider batch per provider, each agent
ends with what its own step asked for, and the run's costs are the sum of each provider's batches,
each at its own provider's batch prices.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from integration.batch.kit import CHECK_TOOL
from nightshift.emulator import EmulatorAdmin
from support.api import create_tool, json_list
from support.runs import ANTHROPIC_MODEL, GEMINI_MODEL, OPENAI_MODEL, Runs

# Three hundred agents made one request at a time, and a run of three steps at three providers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODELS = (ANTHROPIC_MODEL, OPENAI_MODEL, GEMINI_MODEL)
AGENTS = 300
TASKS = ("lookup", "remember", "chat")


def task_of(i: int) -> str:
    return TASKS[(i // len(MODELS)) % len(TASKS)]


def input_of(i: int) -> str:
    return {
        "lookup": "Please check_stock for Apple, Pear and Plum.",
        "remember": f"Remember: my name is Name-{i:03d}; I live in City-{i:03d}.",
        "chat": "Hello there!",
    }[task_of(i)]


async def test_one_run_steps_agents_of_three_providers_each_in_its_own_batches(
    runs: Runs, admin: EmulatorAdmin
) -> None:
    tool = await create_tool(runs.client, CHECK_TOOL)
    agents = [
        await runs.agent(f"trio-{i:03d}", model=MODELS[i % len(MODELS)], tool_ids=[tool["id"]]) for i in range(AGENTS)
    ]

    run = await runs.start([{"agent_id": a["id"], "input": input_of(i)} for i, a in enumerate(agents)])
    done = await runs.wait(run["id"], timeout=240)

    assert done["status"] == "completed", done["progress"]
    assert done["progress"]["agents"] == {"running": 0, "finished": AGENTS, "failed": 0, "cancelled": 0}
    batches = done["progress"]["provider_batches"]
    by_step: defaultdict[int, Counter[str]] = defaultdict(Counter)
    for batch in batches:
        by_step[batch["step_number"]][batch["provider"]] += 1
    # Each step: one batch per provider that had agents in it (Gemini's one model: one batch).
    assert by_step[0] == {"anthropic": 1, "openai": 1, "google_ai": 1}, batches
    assert all(set(count.values()) == {1} for count in by_step.values()), batches
    assert {b["status"] for b in batches} == {"applied"}
    # Costs: the run's are the sum of its batches', and every provider's batches cost something.
    progress = done["progress"]
    assert progress["cost_usd"] == pytest.approx(sum(b["cost_usd"] for b in batches), abs=1e-5)
    assert all(b["cost_usd"] > 0 for b in batches), batches
    assert progress["cost_without_batch_usd"] > progress["cost_usd"]

    messages = await runs.messages(done["id"])
    calls: defaultdict[str, list[str]] = defaultdict(list)
    for message in messages:
        calls[message["agent_id"]] += [c["function"]["name"] for c in message.get("tool_calls") or []]
    for i, agent in enumerate(agents):
        made = calls[agent["id"]]
        assert made[-1] == "send_message", (agent["llm_config"], made)
        if task_of(i) == "lookup":
            assert made.count("check_stock") == 3, made
        elif task_of(i) == "remember":
            assert made.count("core_memory_append") == 2, made
        else:
            assert made == ["send_message"], made

    # What each provider's API saw: Gemini's requests answered each call in the next user turn.
    gemini = [c for c in await admin.model_calls(api="gemini") if c["batch_id"] is not None]
    assert len({c["custom_id"] for c in gemini}) == AGENTS // len(MODELS)
    answered = [c for c in gemini if any("functionResponse" in json.dumps(t) for t in c["body"]["contents"])]
    assert answered, "no Gemini request carried a tool's result back"

    for i in (i for i in range(AGENTS) if task_of(i) == "remember"):
        blocks = json_list(await runs.client.get(f"/v1/agents/{agents[i]['id']}/core-memory/blocks"))
        human = next(b for b in blocks if b["label"] == "human")["value"]
        assert human.count(f"Name-{i:03d}") == 1 and human.count(f"City-{i:03d}") == 1, human
