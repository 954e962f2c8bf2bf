"""What a run looks like from outside: its progress, its messages, its agents with their items."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Join, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.batch_progress import BatchRunProgress
from nightshift.domain.batches import (
    BatchItem,
    BatchRunAgent,
    BatchRunFailure,
    ItemOutcome,
    RequestStatus,
    StepState,
    StepStatus,
)
from nightshift.domain.messages import Message
from nightshift.store import batch_summaries
from nightshift.store.bulk import in_ids
from nightshift.store.items import to_item
from nightshift.store.messages import MESSAGE_COLUMNS, to_message
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import agents, batch_items, deleted_agents, messages

# Built once: an alias proxies every column of the table, work too slow to redo for each statement.
_LATER_ITEMS = batch_items.alias("later")

# A run's items with their agents, live or deleted (an item outlives its agent): the agent's
# name, as it is or as it was, and whether it is deleted.
_WITH_AGENTS: Join = batch_items.outerjoin(agents, agents.c.id == batch_items.c.agent_id).outerjoin(
    deleted_agents, deleted_agents.c.id == batch_items.c.agent_id
)
_AGENT_NAME: ColumnElement[str] = func.coalesce(agents.c.name, deleted_agents.c.name, "")
_AGENT_DELETED: ColumnElement[bool] = agents.c.id.is_(None)


async def run_progress(conn: AsyncConnection, run_id: str) -> BatchRunProgress:
    """The run's items by outcome, its current step, its tokens and cost (see ``runs_progress``)."""
    return (await runs_progress(conn, [run_id]))[run_id]


async def runs_progress(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, BatchRunProgress]:
    """``run_progress`` of each run (every id present), from its provider batches' summaries.

    A closed batch's summary is read from its row; only the items of batches still open are
    counted, so a look at a run costs what its open steps hold, not all it did. One statement,
    and two more when some batch is open, whatever the number of runs.
    """
    summaries = await batch_summaries.summaries_of_runs(conn, run_ids)
    return {run_id: BatchRunProgress.of(summaries[run_id]) for run_id in run_ids}


async def runs_failures(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, list[BatchRunFailure]]:
    """The agents each run failed (every id present), oldest first, in one statement.

    An agent's last item in a run tells: a failed (or expired) request that was retried has a
    later item, so only one that was not shows up here. Whatever failed it counts: the provider's
    error, a batch the provider cancelled or expired, a request that could not be built.
    """
    # The failed items are found through an index of failed items alone, and each is checked
    # against the agent's later items in the run (none) through the index by (run, agent, id):
    # the statement reads the run's failures, not its items.
    later = _LATER_ITEMS
    retried = (
        select(later.c.id)
        .where(
            later.c.batch_run_id == batch_items.c.batch_run_id,
            later.c.agent_id == batch_items.c.agent_id,
            later.c.id > batch_items.c.id,
        )
        .exists()
    )
    query = (
        select(
            batch_items.c.batch_run_id,
            batch_items.c.agent_id,
            _AGENT_NAME,
            _AGENT_DELETED,
            batch_items.c.step_state,
            batch_items.c.request_status,
            batch_items.c.error,
        )
        .select_from(_WITH_AGENTS)
        .where(
            in_ids(conn, batch_items.c.batch_run_id, run_ids),
            # A literal, not a parameter, so that SQLite's planner may use the partial index.
            batch_items.c.outcome == literal_column(f"'{ItemOutcome.FAILED.value}'"),
            batch_items.c.step_status == StepStatus.COMPLETED.value,
            ~retried,
        )
        .order_by(batch_items.c.id)
    )
    failures: dict[str, list[BatchRunFailure]] = {run_id: [] for run_id in run_ids}
    for run_id, agent_id, agent_name, deleted, step_state, request_status, error in await conn.execute(query):
        failures[run_id].append(
            BatchRunFailure(
                agent_id=agent_id,
                agent_name=agent_name,
                step_number=StepState.from_json(step_state).step_number,
                request_status=RequestStatus(request_status),
                error=error,
                agent_deleted=bool(deleted),
            )
        )
    return failures


async def run_messages(conn: AsyncConnection, run_id: str, page: Page, *, agent_id: str | None = None) -> list[Message]:
    """Messages linked to any item of the run, paged by message id (creation order)."""
    item_ids = select(batch_items.c.id).where(batch_items.c.batch_run_id == run_id)
    query = select(*MESSAGE_COLUMNS).where(messages.c.batch_item_id.in_(item_ids))
    if agent_id is not None:
        query = query.where(messages.c.agent_id == agent_id)
    return [to_message(row) for row in await conn.execute(paginate(query, messages.c.id, page))]


async def run_agent_items(conn: AsyncConnection, run_id: str, *, after: str | None, limit: int) -> list[BatchRunAgent]:
    """A page of the run's agents (by id) with their names and items, oldest first: two statements.

    An agent deleted since stays, by the name it had, marked deleted.
    """
    page = (
        select(batch_items.c.agent_id, _AGENT_NAME, _AGENT_DELETED)
        .select_from(_WITH_AGENTS)
        .where(batch_items.c.batch_run_id == run_id)
    )
    if after is not None:
        page = page.where(batch_items.c.agent_id > after)
    page = (
        page.group_by(batch_items.c.agent_id, agents.c.id, agents.c.name, deleted_agents.c.name)
        .order_by(batch_items.c.agent_id)
        .limit(limit)
    )
    found_agents = {str(agent_id): (str(name), bool(deleted)) for agent_id, name, deleted in await conn.execute(page)}
    names = {agent_id: name for agent_id, (name, _) in found_agents.items()}
    query = (
        select(batch_items)
        .where(batch_items.c.batch_run_id == run_id, in_ids(conn, batch_items.c.agent_id, list(names)))
        .order_by(batch_items.c.agent_id, batch_items.c.id)
    )
    found: dict[str, list[BatchItem]] = {agent_id: [] for agent_id in names}
    for row in await conn.execute(query):
        found[row.agent_id].append(to_item(row))
    return [
        BatchRunAgent(
            agent_id=agent_id, agent_name=names[agent_id], items=items, agent_deleted=found_agents[agent_id][1]
        )
        for agent_id, items in found.items()
    ]
