"""Gathering due sleep-time agents into batch runs of their own.

A main agent's finished turn counts towards its group (``store.groups.count_turns``, in the
turn's transaction); the turn that reaches the group's frequency makes it due. The poller looks
at the due groups at every pass and gathers them (``gather``) once the oldest has waited
``SleeptimeRules.interval`` or ``SleeptimeRules.enough`` are due; ``nightshift sleeptime run``
(``POST /v1/sleeptime/run``) gathers an organization's due groups at once, and with ``everything``
first makes due every group whose main agent said anything new.

Gathering is one transaction per organization and slice: the due groups locked, each sleep-time
agent's request (the transcript of its main agent's messages since the last run, one user
message) queued as a batch run of kind ``sleeptime``, and the groups marked gathered, their next
transcript starting after the last message given. A crash before the commit leaves them due; after
it, the run is queued as any run and started once. A sleep-time agent still in its previous run
(or held by a synchronous send) stays due for the next pass; the main agent is never waited for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from nightshift.batch.steps import BATCH_SLICE, queue_batch_run
from nightshift.clock import Clock
from nightshift.domain.batches import BatchRun, BatchRunKind, BatchRunRequest
from nightshift.domain.groups import Group, transcript_message
from nightshift.domain.messages import Role, UserInput
from nightshift.store import agents as agent_store
from nightshift.store import groups as group_store
from nightshift.store import items as item_store
from nightshift.store import messages as message_store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class SleeptimeRules:
    """When the poller gathers due sleep-time agents (``NIGHTSHIFT_SLEEPTIME_INTERVAL_SECONDS`` and
    ``NIGHTSHIFT_SLEEPTIME_ENOUGH``): once the oldest has waited ``interval``, or ``enough`` are due.

    The wait is what lets one provider batch carry a whole fleet's sleep-time agents (and share
    its prompt cache) rather than one small batch per finished turn.
    """

    interval: timedelta = timedelta(minutes=5)
    enough: int = 1000
    # The most step requests a sleep-time run gets (its agents edit, then call memory_finish_edits).
    max_steps: int = 10


async def gather_when_due(engine: AsyncEngine, clock: Clock, rules: SleeptimeRules) -> list[BatchRun]:
    """The poller's look: gather every due group when the oldest has waited long enough or
    enough are due; nothing otherwise (one read of the due index)."""
    async with engine.connect() as conn:
        count, oldest = await group_store.due_summary(conn)
    now = clock.now()
    if count == 0 or oldest is None or (count < rules.enough and now - oldest < rules.interval):
        return []
    return await gather(engine, clock, max_steps=rules.max_steps)


async def gather(
    engine: AsyncEngine, clock: Clock, *, org_id: str | None = None, everything: bool = False, max_steps: int = 10
) -> list[BatchRun]:
    """Queue a sleep-time batch run per organization (and ``BATCH_SLICE`` agents) of the due
    groups (of ``org_id`` alone, if given), whatever the time; ``everything``: first make due every
    group of ``org_id`` whose main agent said anything since its sleep-time agents' last run.
    Returns the runs queued."""
    runs: list[BatchRun] = []
    if everything:
        assert org_id is not None, "everything is asked for one organization"
        async with engine.begin() as conn:
            await group_store.make_due_with_news(conn, org_id, clock.now())
    skipped: set[str] = set()
    while True:
        async with engine.begin() as conn:
            due = [
                g for g in await group_store.claim_due(conn, org_id=org_id, limit=BATCH_SLICE) if g.id not in skipped
            ]
            if not due:
                return runs
            org = due[0].organization_id
            mine = [g for g in due if g.organization_id == org]
            run, waiting = await _queue(conn, mine, clock.now(), max_steps=max_steps)
        skipped |= waiting  # (each round gathers its groups or skips them: the loop ends)
        if run is not None:
            runs.append(run)


async def _queue(
    conn: AsyncConnection, due: list[Group], now: datetime, *, max_steps: int
) -> tuple[BatchRun | None, set[str]]:
    """Queue one organization's due groups as a sleep-time run; returns it (None when no group
    had a sleep-time agent free to run) and the groups left due for a later pass."""
    org_id = due[0].organization_id
    members = [a for g in due for a in g.agent_ids]
    await agent_store.lock_agents(conn, members)
    busy = await item_store.agents_in_open_steps(conn, members) | await agent_store.agents_stepping(conn, members, now)
    present = set(await agent_store.providers_of(conn, org_id, members))
    waiting = {g.id for g in due if any(a in busy for a in g.agent_ids)}
    ready = [g for g in due if g.id not in waiting and g.manager_agent_id is not None]
    said = await message_store.messages_after(
        conn, {g.manager_agent_id: g.last_processed_message_id for g in ready if g.manager_agent_id}
    )
    requests: list[BatchRunRequest] = []
    gathered: dict[str, str | None] = {g.id: None for g in due if g.id not in waiting}  # (managerless: cleared)
    for group in ready:
        assert group.manager_agent_id is not None
        messages = [m for m in said[group.manager_agent_id] if m.role is not Role.SYSTEM]
        if not messages:
            continue  # nothing new to read: no longer due
        gathered[group.id] = messages[-1].id
        text = transcript_message(messages)
        requests += [
            BatchRunRequest(agent_id=agent_id, messages=(UserInput(text=text),))
            for agent_id in group.agent_ids
            if agent_id in present
        ]
    run = None
    if requests:
        run = await queue_batch_run(
            conn, org_id, requests, now=now, callback_url=None, default_max_steps=max_steps, kind=BatchRunKind.SLEEPTIME
        )
        log.info("queued sleep-time run %s for %d agents", run.id, len(requests))
    await group_store.mark_gathered(conn, gathered, now)
    return run, waiting
