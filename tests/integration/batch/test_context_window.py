"""Long-lived agents stay inside their context window: old messages are summarized, not lost.

The emulator refuses any request over the model's window (set here to the agents' own limit), so
an overflow anywhere fails the test. The agents read a 20-page document through a paging tool
whose every page is ~1,500 characters: more than their window holds, so that each agent
summarizes several times.
"""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.domain.usage import Usage
from nightshift.emulator.anthropic_api import segments as anthropic_segments
from nightshift.emulator.openai_api import segments as openai_segments
from nightshift.emulator.tokens import count_openai_tokens, prompt_tokens
from nightshift.pricing import PriceTable
from support.api import create_tool, json_object
from support.runs import ANTHROPIC_MODEL, OPENAI_MODEL
from support.stepped import SteppedRuns

PAGES = 20
WINDOW = 7_000
MAX_TOKENS = 512

READ_PAGE = '''
def read_page(page: int) -> str:
    """Read one page of the long report.

    Args:
        page: The page number, from 1.
    """
    words = " ".join(f"line{n} of page {page} tells of rivers, harbours and trade." for n in range(25))
    text = f"PAGEMARK{page:02d}Z {words}"[:1480]
    if page < 20:
        return f"{text} More: call read_page with page={page + 1}."
    return f"{text} This was the last page."
'''

TASK = "Please read the long report with read_page, starting at page 1, to the end."


async def _reader(stepped: SteppedRuns, name: str, model: str) -> dict[str, Any]:
    return await stepped.agent(
        name,
        model=model,
        tools=["read_page"],
        context_window_limit=WINDOW,
        max_tokens=MAX_TOKENS,
        include_base_tools=True,
    )


async def _context(stepped: SteppedRuns, agent_id: str) -> dict[str, Any]:
    return json_object(await stepped.client.get(f"/v1/agents/{agent_id}/context"))


async def _check_agent_kept_everything(stepped: SteppedRuns, agent_id: str) -> None:
    """Under its window, a summary in context, and every page still stored and searchable."""
    context = await _context(stepped, agent_id)
    assert context["context_window_size_max"] == WINDOW
    assert context["context_window_size_current"] <= WINDOW - MAX_TOKENS
    assert context["summary_memory"] and "Summary of" in context["summary_memory"]
    stored = await stepped.context(agent_id)
    # Before its first summary the agent was warned, once, that its window was filling up.
    said = [str(m.get("content")) for m in stored if m["message_type"] == "user_message"]
    first_summary = next(i for i, text in enumerate(said) if "left your context window" in text)
    assert sum("context window is filling up" in text for text in said[:first_summary]) == 1
    returns = [m for m in stored if m["message_type"] == "tool_return_message"]
    pages = {n for n in range(1, PAGES + 1) if any(f"PAGEMARK{n:02d}Z" in m["tool_return"] for m in returns)}
    assert pages == set(range(1, PAGES + 1))
    # Every page, evicted or not, is found by the base tool's search (the agent's recall memory).
    for page in range(1, PAGES + 1):
        found = json_object(
            await stepped.client.post(
                f"/v1/agents/{agent_id}/tools/conversation_search/run",
                json={"args": {"query": f"PAGEMARK{page:02d}Z"}},
            )
        )
        assert found["status"] == "success", found
        assert any(f"PAGEMARK{page:02d}Z" in r["text"] for r in found["func_return"]["results"]), found


@pytest.mark.parametrize("model", [ANTHROPIC_MODEL, OPENAI_MODEL], ids=["anthropic", "openai"])
async def test_a_batch_run_longer_than_the_window_summarizes_in_its_batches(stepped: SteppedRuns, model: str) -> None:
    stepped.model.configure(context_windows={model.split("/", 1)[1]: WINDOW})
    await create_tool(stepped.client, READ_PAGE)
    agents = [await _reader(stepped, f"reader-{i}", model) for i in range(3)]

    run = await stepped.start([{"agent_id": a["id"], "input": TASK, "max_steps": PAGES + 5} for a in agents])
    done = await stepped.finish(run["id"])

    assert done["status"] == "completed", done["progress"]
    assert done["progress"]["failures"] == [], done["progress"]
    calls = stepped.model.batch_calls()
    summaries = [c for c in calls if not c["body"].get("tools")]
    # Every summary went through a provider batch, alongside the other agents' steps.
    assert summaries and all(c["custom_id"] is not None and c["batch_id"] is not None for c in calls)
    assert done["progress"]["summaries"] == len(summaries)
    assert len(summaries) >= 2 * len(agents)  # well past the window: summaries over summaries
    assert len({c["batch_id"] for c in summaries}) < len(summaries) or len(summaries) <= len(agents)
    for agent in agents:
        await _check_agent_kept_everything(stepped, agent["id"])
    # The run's tokens (and so its cost) are those of every request sent, the summaries' included.
    usage = done["progress"]["usage"]
    sent = sum(_prompt_tokens(c) for c in calls)
    assert usage["input_tokens"] + usage["cache_read_tokens"] + usage["cache_write_tokens"] == sent
    # Each agent answered PAGES + 1 steps (every page, then its answer); its summaries are no step, but cost.
    listed = json_object(await stepped.client.get(f"/v1/messages/batches/{run['id']}/agents"))["agents"]
    assert [a["steps"] for a in listed] == [PAGES + 1] * len(agents)
    assert sum(a["cost_usd"] for a in listed) == pytest.approx(done["progress"]["cost_usd"], abs=1e-5)
    prices = PriceTable()
    expected = prices.cost(model, Usage.from_json(usage), batch=True)
    assert expected is not None and done["progress"]["cost_usd"] == pytest.approx(
        expected.usd, abs=1e-6
    )  # shown to a millionth


def _prompt_tokens(call: dict[str, Any]) -> int:
    """A request's prompt tokens, counted as the emulator counts them."""
    if call["api"] == "openai":
        return prompt_tokens(openai_segments(call["body"]), count_openai_tokens)
    return prompt_tokens(anthropic_segments(call["body"]))


async def test_synchronous_turns_past_the_window_stay_inside_it(stepped: SteppedRuns) -> None:
    stepped.model.configure(context_windows={ANTHROPIC_MODEL.split("/", 1)[1]: WINDOW})
    await create_tool(stepped.client, READ_PAGE)
    agent = await _reader(stepped, "sync-reader", ANTHROPIC_MODEL)

    response = await stepped.client.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"messages": [{"role": "user", "content": TASK}], "max_steps": PAGES + 5},
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["stop_reason"]["stop_reason"] == "end_turn", body["stop_reason"]
    returns = [m for m in body["messages"] if m["message_type"] == "tool_return_message"]
    assert len([m for m in returns if "PAGEMARK" in m["tool_return"]]) == PAGES
    calls = stepped.model.batch_calls()
    summaries = [c for c in calls if not c["body"].get("tools")]
    assert summaries and all(c["custom_id"] is None for c in calls)
    await _check_agent_kept_everything(stepped, agent["id"])


HUGE_TOOL = '''
def dump_logs(day: str) -> str:
    """Return every log line of a day.

    Args:
        day: The day, as YYYY-MM-DD.
    """
    return "log line of a busy server " * 1500
'''


async def test_an_agent_whose_newest_messages_cannot_fit_fails_alone_saying_why(stepped: SteppedRuns) -> None:
    stepped.model.configure(context_windows={ANTHROPIC_MODEL.split("/", 1)[1]: WINDOW})
    await create_tool(stepped.client, HUGE_TOOL)
    await create_tool(stepped.client, READ_PAGE)
    flooded = await stepped.agent("flooded", tools=["dump_logs"], context_window_limit=WINDOW, max_tokens=MAX_TOKENS)
    fine = await _reader(stepped, "fine", ANTHROPIC_MODEL)

    run = await stepped.start(
        [
            {"agent_id": flooded["id"], "input": "Please use dump_logs for 2026-11-30."},
            {"agent_id": fine["id"], "input": "Hello, how are you?"},
        ]
    )
    done = await stepped.finish(run["id"])

    assert done["status"] == "completed", done["progress"]
    (failure,) = done["progress"]["failures"]
    assert failure["agent_id"] == flooded["id"]
    assert "does not fit its context window of 7000 tokens" in failure["error"], failure
    assert "raise its context_window_limit" in failure["error"]
    assert done["progress"]["agents"]["finished"] == 1
