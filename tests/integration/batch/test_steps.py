"""Stepping: who continues, who stops, when a run ends, and what the model sees in the next step."""

from __future__ import annotations

import json
from datetime import datetime

from integration.batch.kit import by_agent, call, conversation, say, system_text
from support.api import create_tool
from support.runs import LOOKUP_TOOL
from support.stepped import SteppedRuns


async def test_every_agent_continues_with_a_heartbeat(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, LOOKUP_TOOL)
    agents = [await stepped.agent(f"a{i}", tools=["lookup_order"]) for i in range(3)]
    for agent in agents:
        stepped.model.script(
            agent["id"],
            call("lookup_order", heartbeat=True, order_id=f"X-{agent['name']}"),
            say(f"done for {agent['name']}"),
        )
    run = await stepped.start(
        [
            {"agent_id": a["id"], "messages": [{"role": "user", "content": f"where is my order? ({a['name']})"}]}
            for a in agents
        ]
    )
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"] == {"running": 0, "finished": 3, "failed": 0, "cancelled": 0}
    steps = [b["step_number"] for b in done["progress"]["provider_batches"]]
    assert steps == [0, 1]
    assert done["progress"]["step"] == 1

    messages = await stepped.messages(run["id"])
    assert by_agent(messages) == {a["id"]: ["user", "assistant", "tool", "user", "assistant", "tool"] for a in agents}
    for agent in agents:
        own = [m for m in messages if m["agent_id"] == agent["id"]]
        tool_result = json.loads(own[2]["content"][0]["text"])
        assert tool_result["status"] == "OK"
        assert tool_result["message"] == f"order X-{agent['name']} shipped"
        heartbeat = json.loads(own[3]["content"][0]["text"])
        assert heartbeat["type"] == "heartbeat"
        # The heartbeat and the second step's messages belong to the step-1 batch item.
        assert own[3]["batch_item_id"] == own[4]["batch_item_id"] != own[0]["batch_item_id"]

        first, second = stepped.model.calls(agent["id"])
        seen = "\n".join(conversation(second))
        assert f"where is my order? ({agent['name']})" in seen
        assert f"order X-{agent['name']} shipped" in seen
        assert '"type": "heartbeat"' in seen
        assert f"order X-{agent['name']} shipped" not in "\n".join(conversation(first))


async def test_agents_that_stop_get_no_next_step(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, LOOKUP_TOOL)
    goes_on = await stepped.agent("goes-on", tools=["lookup_order"])
    no_heartbeat = await stepped.agent("no-heartbeat", tools=["lookup_order"])
    exits = await stepped.agent(
        "exits", tools=["lookup_order"], tool_rules=[{"type": "exit_loop", "tool_name": "lookup_order"}]
    )
    stepped.model.script(goes_on["id"], call("lookup_order", heartbeat=True, order_id="1"), say("one"))
    stepped.model.script(no_heartbeat["id"], call("lookup_order", heartbeat=False, order_id="2"))
    # exit_loop wins over the model's request for another turn.
    stepped.model.script(exits["id"], call("lookup_order", heartbeat=True, order_id="3"))
    agents = [goes_on, no_heartbeat, exits]
    run = await stepped.start([{"agent_id": a["id"], "input": "check my order"} for a in agents])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert done["progress"]["agents"]["finished"] == 3
    assert [b["step_number"] for b in done["progress"]["provider_batches"]] == [0, 1]
    second_step = done["progress"]["provider_batches"][1]
    assert second_step["request_counts"]["succeeded"] == 1

    assert by_agent(await stepped.messages(run["id"])) == {
        goes_on["id"]: ["user", "assistant", "tool", "user", "assistant", "tool"],
        no_heartbeat["id"]: ["user", "assistant", "tool"],
        exits["id"]: ["user", "assistant", "tool"],
    }
    assert len(stepped.model.calls(goes_on["id"])) == 2
    assert len(stepped.model.calls(no_heartbeat["id"])) == 1
    assert len(stepped.model.calls(exits["id"])) == 1


async def test_run_completes_when_the_last_agent_stops(stepped: SteppedRuns) -> None:
    quick = await stepped.agent("quick")
    slow = await stepped.agent("slow")
    stepped.model.script(quick["id"], say("bye"))
    stepped.model.script(
        slow["id"],
        call("conversation_search", heartbeat=True, query="order"),
        call("conversation_search", heartbeat=True, query="parcel"),
        say("found nothing"),
    )
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in (quick, slow)])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    assert [b["step_number"] for b in done["progress"]["provider_batches"]] == [0, 1, 2]
    assert by_agent(await stepped.messages(run["id"]))[slow["id"]] == ["user", "assistant", "tool"] * 3
    # The run was not completed before the last step was applied.
    last = done["progress"]["provider_batches"][-1]
    assert last["status"] == "applied"
    assert datetime.fromisoformat(done["completed_at"]) >= datetime.fromisoformat(last["ended_at"])


async def test_run_fails_when_every_agent_fails(stepped: SteppedRuns) -> None:
    agents = [await stepped.agent(f"doomed{i}") for i in range(2)]
    stepped.model.configure(errors={a["id"]: "invalid_request_error" for a in agents})
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    done = await stepped.finish(run["id"])
    assert done["status"] == "failed", done
    assert done["completed_at"] is not None
    assert done["progress"]["agents"] == {"running": 0, "finished": 0, "failed": 2, "cancelled": 0}


async def test_memory_tools_change_blocks_while_other_tools_run(stepped: SteppedRuns) -> None:
    await create_tool(stepped.client, LOOKUP_TOOL)
    appender = await stepped.agent("appender")
    replacer = await stepped.agent("replacer")
    rethinker = await stepped.agent("rethinker")
    looker = await stepped.agent("looker", tools=["lookup_order"])
    stepped.model.script(
        appender["id"], call("core_memory_append", heartbeat=True, label="human", content="Likes tea."), say("ok")
    )
    stepped.model.script(
        replacer["id"],
        call("core_memory_replace", heartbeat=True, label="persona", old_content="replacer", new_content="Rita"),
        say("ok"),
    )
    stepped.model.script(
        rethinker["id"],
        call("rethink_memory", heartbeat=True, target_block_label="human", new_memory="Name: Bo. Lives in Oslo."),
        say("ok"),
    )
    stepped.model.script(looker["id"], call("lookup_order", heartbeat=False, order_id="77"))
    agents = [appender, replacer, rethinker, looker]
    run = await stepped.start([{"agent_id": a["id"], "input": "remember me"} for a in agents])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done

    async def block(agent: dict[str, object], label: str) -> str:
        response = await stepped.client.get(f"/v1/agents/{agent['id']}/core-memory/blocks/{label}")
        assert response.status_code == 200, response.text
        return str(response.json()["value"])

    assert await block(appender, "human") == "Nothing known yet.\nLikes tea."
    assert await block(replacer, "persona") == "I am Rita."
    assert await block(rethinker, "human") == "Name: Bo. Lives in Oslo."
    assert await block(looker, "human") == "Nothing known yet."
    looked = [m for m in await stepped.messages(run["id"]) if m["agent_id"] == looker["id"]]
    assert json.loads(looked[-1]["content"][0]["text"])["message"] == "order 77 shipped"

    for agent, expected in ((appender, "Likes tea."), (replacer, "I am Rita."), (rethinker, "Lives in Oslo.")):
        first, second = stepped.model.calls(agent["id"])
        assert expected not in system_text(first)
        assert expected in system_text(second)
    # The stored system message (the first of the context window) carries the new memory too.
    context = await stepped.context(appender["id"])
    assert "Likes tea." in context[0]["content"]


async def test_edits_of_a_shared_block_in_one_step_all_count(stepped: SteppedRuns) -> None:
    shared = (
        await stepped.client.post("/v1/blocks/", json={"label": "team", "value": "Team notes:", "limit": 500})
    ).json()
    agents = [await stepped.agent(f"member{i}", block_ids=[shared["id"]]) for i in range(3)]
    for index, agent in enumerate(agents):
        stepped.model.script(
            agent["id"], call("core_memory_append", heartbeat=True, label="team", content=f"note {index}"), say("ok")
        )
    run = await stepped.start([{"agent_id": a["id"], "input": "add a note"} for a in agents])
    done = await stepped.finish(run["id"])
    assert done["status"] == "completed", done
    value = (await stepped.client.get(f"/v1/blocks/{shared['id']}")).json()["value"]
    assert sorted(value.split("\n")) == sorted(["Team notes:", "note 0", "note 1", "note 2"])
    for agent in agents:
        _, second = stepped.model.calls(agent["id"])
        assert all(f"note {i}" in system_text(second) for i in range(3))


async def test_a_step_mixes_models_in_one_batch_where_the_provider_allows_it(stepped: SteppedRuns) -> None:
    # Anthropic takes any mix of models in one batch; OpenAI takes one model per batch.
    models = {
        "haiku": "anthropic/claude-3-5-haiku-20241022",
        "sonnet": "anthropic/claude-sonnet-4-20250514",
        "mini": "openai/gpt-4o-mini",
        "4o": "openai/gpt-4o",
    }
    agents = {name: await stepped.agent(name, model=model) for name, model in models.items()}
    for agent in agents.values():
        stepped.model.script(agent["id"], say("done"))
    run = await stepped.start([{"agent_id": a["id"], "input": "hello"} for a in agents.values()])
    done = await stepped.finish(run["id"])

    assert done["status"] == "completed", done
    assert sorted(b["provider"] for b in done["progress"]["provider_batches"]) == ["anthropic", "openai", "openai"]
    for name, agent in agents.items():
        (seen,) = stepped.model.calls(agent["id"])
        assert seen["model"] == models[name].split("/", 1)[1]
