"""A run's progress, read from its provider batches' stored summaries, is what counting every
item of the run gives.

``counted`` is how a run's progress was computed before summaries were stored (every item
counted and summed; the per-batch sums added in the order of the batches' ids). Each test takes
runs through their stages (stepping, completed, failed and retried requests, summarized windows,
cancelled, an agent deleted) and compares the two at every stage, and checks that every batch
holds a summary equal to one counted afresh from its items, open ones included (but those open
when one of their agents was deleted, which hold none until they are applied).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from integration.batch.kit import call, say
from integration.batch.test_context_window import MAX_TOKENS, PAGES, READ_PAGE, TASK, WINDOW
from nightshift.batch import application
from nightshift.batch.worker import Worker
from nightshift.domain.batch_progress import BatchRunProgress, BatchSummary
from nightshift.domain.batches import ItemOutcome, ProviderBatchStatus, StepStatus
from nightshift.domain.costs import Costs
from nightshift.domain.usage import USAGE_KEYS, Usage
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedError, ScriptedReply
from nightshift.store import provider_batches as batch_store
from nightshift.store.batch_run_views import run_progress
from nightshift.store.batch_summaries import summarize
from nightshift.store.tables import batch_items, provider_batches
from support.api import create_tool
from support.clock import clock_of
from support.runs import OPENAI_MODEL, Runs

pytestmark = pytest.mark.settings(poller=False)  # each test drives the worker, one pass at a time


async def counted(conn: AsyncConnection, run_id: str) -> BatchRunProgress:
    """The run's progress counted from all its items, as ``batch_run_views.runs_progress`` did before."""
    by_state = await conn.execute(
        select(batch_items.c.step_status, batch_items.c.outcome, func.count(), func.max(provider_batches.c.step_number))
        .join(provider_batches, provider_batches.c.id == batch_items.c.provider_batch_id)
        .where(batch_items.c.batch_run_id == run_id)
        .group_by(batch_items.c.step_status, batch_items.c.outcome)
    )
    running, step, outcomes = 0, 0, Counter[ItemOutcome]()
    for step_status, outcome, count, max_step in by_state:
        step = max(step, int(max_step or 0))
        if step_status == StepStatus.PAUSED.value or outcome is None:
            running += int(count)
        else:
            outcomes[ItemOutcome(outcome)] += int(count)
    sums = await conn.execute(
        select(
            batch_items.c.provider_batch_id,
            *(func.sum(batch_items.c.usage[key].as_integer()) for key in USAGE_KEYS),
            func.sum(batch_items.c.cost_usd),
            func.sum(batch_items.c.cost_without_batch_usd),
            func.sum(batch_items.c.cache_savings_usd),
            func.sum(batch_items.c.takeover_usd),
        )
        .where(batch_items.c.batch_run_id == run_id, batch_items.c.usage.is_not(None))
        .group_by(batch_items.c.provider_batch_id)
        .order_by(batch_items.c.provider_batch_id)
    )
    usage: Usage | None = None
    cost = Costs()
    batch_usage: dict[str, Usage] = {}
    batch_cost: dict[str, Costs] = {}
    for batch_id, *values in sums:
        tokens, (billed, without_batch, savings, takeover) = values[: len(USAGE_KEYS)], values[len(USAGE_KEYS) :]
        these = Usage.from_json({key: int(total or 0) for key, total in zip(USAGE_KEYS, tokens, strict=True)})
        usage = these if usage is None else usage + these
        batch_usage[batch_id] = these
        these_costs = Costs(
            usd=float(billed or 0.0),
            without_batch_usd=float(without_batch or 0.0),
            cache_savings_usd=float(savings or 0.0),
            takeover_usd=float(takeover or 0.0),
        )
        cost += these_costs
        batch_cost[batch_id] = these_costs
    return BatchRunProgress(
        running=running,
        outcomes=dict(outcomes),
        step=step,
        usage=usage,
        cost=cost,
        batch_usage=batch_usage,
        batch_cost=batch_cost,
    )


def same_sums(left: Any, right: Any) -> bool:
    """Whether two progresses or summaries are equal, their dollar sums up to the last bits of a
    float: the database adds a batch's costs in the order it reads its rows, and that order may
    differ between two reads (PostgreSQL moves a row it updates)."""
    if isinstance(left, float) and isinstance(right, float):
        return math.isclose(left, right, rel_tol=1e-12, abs_tol=1e-15)
    if dataclasses.is_dataclass(left) and type(left) is type(right):
        return all(same_sums(getattr(left, f.name), getattr(right, f.name)) for f in dataclasses.fields(left))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_sums(left[k], right[k]) for k in left)
    return bool(left == right)


async def check(engine: AsyncEngine, run_id: str, *, forgotten: frozenset[str] = frozenset()) -> BatchRunProgress:
    """Compare the run's progress with its items counted; check its batches' summaries.

    ``forgotten``: open batches one of whose agents was deleted, so hold no summary.
    """
    async with engine.connect() as conn:
        progress = await run_progress(conn, run_id)
        expected = await counted(conn, run_id)
        assert same_sums(progress, expected), (progress, expected)
        batches = (
            await conn.execute(
                select(provider_batches.c.id, provider_batches.c.status, provider_batches.c.summary).where(
                    provider_batches.c.batch_run_id == run_id
                )
            )
        ).all()
        afresh = await summarize(conn, [b.id for b in batches])
    for batch in batches:
        if batch.id in forgotten:
            assert batch.summary is None, batch
        else:  # from the moment it is written, whatever its state
            assert batch.summary is not None, batch
            stored, fresh = BatchSummary.from_json(batch.summary), afresh.get(batch.id, BatchSummary())
            assert same_sums(stored, fresh), (batch, fresh)
    return progress


async def step(app: FastAPI) -> int:
    """One pass of the app's worker once the batches are due again; how many batches it handled."""
    worker: Worker = app.state.nightshift.worker
    clock_of(app).advance(worker.poll_interval * 2)
    return await worker.run_once()


async def status_of(runs: Runs, run_id: str) -> dict[str, Any]:
    response = await runs.client.get(f"/v1/messages/batches/{run_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_run_with_failures_and_retries_reads_as_counted_at_every_step(
    runs: Runs, admin: EmulatorAdmin, app: FastAPI
) -> None:
    engine: AsyncEngine = app.state.nightshift.engine
    goes_on = await runs.agent("goes-on")
    answers = await runs.agent("answers")
    refused = await runs.agent("refused")
    flaky = await runs.agent("flaky")
    other = await runs.agent("other-provider", model=OPENAI_MODEL)
    await admin.configure(errors={refused["id"]: "invalid_request_error"})
    await admin.script(goes_on["id"], call("conversation_search", heartbeat=True, query="hi"), say("done"))
    await admin.script(answers["id"], say("hello"))
    await admin.script(flaky["id"], ScriptedReply(error=ScriptedError(type="rate_limit_error")), say("made it"))
    await admin.script(other["id"], call("conversation_search", heartbeat=True, query="x"), say("done too"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (goes_on, answers, refused, flaky, other)])

    progress = await check(engine, run["id"])
    assert progress.running == 5
    for _ in range(5):
        if (await status_of(runs, run["id"]))["status"] != "running":
            break
        await step(app)
        await check(engine, run["id"])
    done = await status_of(runs, run["id"])
    assert done["status"] == "completed", done
    progress = await check(engine, run["id"])
    assert progress.outcomes == {
        ItemOutcome.CONTINUED: 2,
        ItemOutcome.FINISHED: 4,
        ItemOutcome.FAILED: 1,
        ItemOutcome.RETRIED: 1,
    }
    assert progress.running == 0 and progress.step == 1 and progress.cost.usd > 0


async def test_a_run_between_its_results_and_their_application_reads_as_counted(
    runs: Runs, admin: EmulatorAdmin, app: FastAPI
) -> None:
    worker: Worker = app.state.nightshift.worker
    engine: AsyncEngine = app.state.nightshift.engine
    agents = [await runs.agent(f"ended-{i}") for i in range(3)]
    await admin.configure(errors={agents[2]["id"]: "invalid_request_error"})
    await admin.script(agents[0]["id"], call("conversation_search", heartbeat=True, query="x"), say("done"))
    await admin.script(agents[1]["id"], say("done"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    clock_of(app).advance(worker.poll_interval * 2)
    async with engine.connect() as conn:
        (batch,) = await batch_store.provider_batches_of_run(conn, run["id"])
    ended = (
        await application.poll(worker.parts, worker.leases, batch)
    ).batch  # results stored, not applied: as between two stages
    assert ended.status is ProviderBatchStatus.ENDED
    progress = await check(engine, run["id"])
    assert progress.running == 3 and progress.usage and progress.usage.output_tokens > 0

    await step(app)  # applied, and the next step submitted for the agent that goes on
    progress = await check(engine, run["id"])
    assert progress.outcomes == {ItemOutcome.CONTINUED: 1, ItemOutcome.FINISHED: 1, ItemOutcome.FAILED: 1}
    assert progress.running == 1


async def test_a_cancelled_run_reads_as_counted(runs: Runs, admin: EmulatorAdmin, app: FastAPI) -> None:
    engine: AsyncEngine = app.state.nightshift.engine
    agents = [await runs.agent(f"cancelled-{i}") for i in range(3)]
    for agent in agents:
        await admin.script(agent["id"], call("conversation_search", heartbeat=True, query="x"), say("never"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    await step(app)  # step 0 applied; step 1 submitted
    progress = await check(engine, run["id"])
    assert progress.count(ItemOutcome.CONTINUED) == 3 and progress.running == 3

    cancelled = await runs.client.patch(f"/v1/messages/batches/{run['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    await check(engine, run["id"])  # step 1 cancelling: its items are final already
    await step(app)  # the provider is told
    progress = await check(engine, run["id"])
    assert progress.count(ItemOutcome.CANCELLED) == 3 and progress.running == 0
    async with engine.connect() as conn:
        statuses = set(await conn.scalars(select(provider_batches.c.status)))
    assert statuses == {"applied", "cancelled"}


@pytest.mark.parametrize("batch", ["applied", "open"])
async def test_deleting_an_agent_of_a_batch_reads_as_counted(
    runs: Runs, admin: EmulatorAdmin, app: FastAPI, batch: str
) -> None:
    """The deleted agent's items stay: an applied batch reads as it did, with its summary; an open
    one loses the agent (its item cancelled) and counts its items until it is applied."""
    engine: AsyncEngine = app.state.nightshift.engine
    agents = [await runs.agent(f"kept-{i}") for i in range(3)]
    for agent in agents:
        await admin.script(agent["id"], say("done"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in agents])
    if batch == "applied":
        await step(app)
        assert (await check(engine, run["id"])).count(ItemOutcome.FINISHED) == 3
    else:
        assert (await check(engine, run["id"])).running == 3  # submitted, not yet polled
    before = await status_of(runs, run["id"])

    assert (await runs.client.delete(f"/v1/agents/{agents[0]['id']}")).status_code == 200
    async with engine.connect() as conn:
        (batch_id,) = await conn.scalars(
            select(provider_batches.c.id).where(provider_batches.c.batch_run_id == run["id"])
        )
    if batch == "applied":
        progress = await check(engine, run["id"])
        assert progress.count(ItemOutcome.FINISHED) == 3 and progress.cost.usd > 0
        assert (await status_of(runs, run["id"]))["progress"] == before["progress"]
        return
    progress = await check(engine, run["id"], forgotten=frozenset({batch_id}))
    assert progress.running == 2 and progress.count(ItemOutcome.CANCELLED) == 1
    await step(app)  # ended and applied: its summary is stored again
    progress = await check(engine, run["id"])
    assert progress.count(ItemOutcome.FINISHED) == 2 and progress.count(ItemOutcome.CANCELLED) == 1
    done = await status_of(runs, run["id"])
    assert done["status"] == "completed" and done["progress"]["agents"]["cancelled"] == 1


async def test_a_run_that_summarizes_windows_reads_as_counted_at_every_step(
    runs: Runs, admin: EmulatorAdmin, app: FastAPI
) -> None:
    engine: AsyncEngine = app.state.nightshift.engine
    model = "anthropic/claude-3-5-haiku-20241022"
    await admin.configure(context_windows={model.split("/", 1)[1]: WINDOW})
    await create_tool(runs.client, READ_PAGE)
    reader = await runs.agent(
        "reader",
        model=model,
        tools=["read_page"],
        context_window_limit=WINDOW,
        max_tokens=MAX_TOKENS,
        include_base_tools=True,
    )
    run = await runs.start([{"agent_id": reader["id"], "input": TASK, "max_steps": PAGES + 5}])
    for _ in range(4 * PAGES):
        if (await status_of(runs, run["id"]))["status"] != "running":
            break
        await step(app)
        await check(engine, run["id"])
    done = await status_of(runs, run["id"])
    assert done["status"] == "completed", done
    progress = await check(engine, run["id"])
    assert progress.count(ItemOutcome.SUMMARIZED) > 0 and progress.count(ItemOutcome.FINISHED) == 1
