"""Agent runs: one message send to one agent, its steps, status and callback (see ``domain.agent_runs``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Row, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agent_runs import AgentRun, AgentRunStatus, AgentRunStep
from nightshift.store.mapping import from_row, row_writer
from nightshift.store.pagination import Page, paginate
from nightshift.store.tables import agent_runs, agents

OPEN = (AgentRunStatus.CREATED.value, AgentRunStatus.RUNNING.value)


def _steps(data: list[dict[str, Any]]) -> tuple[AgentRunStep, ...]:
    return tuple(AgentRunStep.from_json(s) for s in data)


def to_run(row: Row[Any]) -> AgentRun:
    """Map an ``agent_runs`` row to the domain type."""
    return from_row(AgentRun, row, status=AgentRunStatus, steps=_steps)


_run_values = row_writer(AgentRun, agent_runs, steps=lambda steps: [s.to_json() for s in steps])


async def insert_run(conn: AsyncConnection, run: AgentRun) -> None:
    await conn.execute(insert(agent_runs).values(_run_values(run)))


async def get_run(conn: AsyncConnection, org_id: str, run_id: str) -> AgentRun | None:
    query = select(agent_runs).where(agent_runs.c.organization_id == org_id, agent_runs.c.id == run_id)
    row = (await conn.execute(query)).first()
    return to_run(row) if row is not None else None


async def list_runs(
    conn: AsyncConnection,
    org_id: str,
    page: Page,
    *,
    agent_ids: Sequence[str] = (),
    statuses: Sequence[AgentRunStatus] = (),
    background: bool | None = None,
    stop_reason: str | None = None,
) -> list[AgentRun]:
    """A page of the organization's agent runs, filtered by agent, status, mode and stop reason."""
    query = select(agent_runs).where(agent_runs.c.organization_id == org_id)
    if agent_ids:
        query = query.where(agent_runs.c.agent_id.in_(list(agent_ids)))
    if statuses:
        query = query.where(agent_runs.c.status.in_([s.value for s in statuses]))
    if background is not None:
        query = query.where(agent_runs.c.background == background)
    if stop_reason is not None:
        query = query.where(agent_runs.c.stop_reason == stop_reason)
    return [to_run(r) for r in await conn.execute(paginate(query, agent_runs.c.id, page))]


async def start_run(conn: AsyncConnection, run_id: str, now: datetime) -> bool:
    """created -> running; False when the run was cancelled (or failed) before it started."""
    result = await conn.execute(
        update(agent_runs)
        .where(agent_runs.c.id == run_id, agent_runs.c.status == AgentRunStatus.CREATED.value)
        .values(status=AgentRunStatus.RUNNING.value, updated_at=now)
    )
    return result.rowcount > 0


async def add_step(conn: AsyncConnection, run: AgentRun, step: AgentRunStep, now: datetime) -> AgentRun | None:
    """Record a model call of the run (only the process stepping the run writes its steps); None
    when the run is no longer running (cancelled, or its agent deleted): then its step is not
    written. A compare-and-set that locks the run's row, so a cancel is either before the step's
    write (which then writes nothing) or after it."""
    steps = (*run.steps, step)
    result = await conn.execute(
        update(agent_runs)
        .where(agent_runs.c.id == run.id, agent_runs.c.status == AgentRunStatus.RUNNING.value)
        .values(steps=[s.to_json() for s in steps], updated_at=now)
    )
    if result.rowcount == 0:
        return None
    return replace(run, steps=steps, updated_at=now)


async def still_running(conn: AsyncConnection, run_id: str, now: datetime) -> bool:
    """Whether the run is still running, its row locked until the transaction ends (as ``add_step``):
    a write of the run that checks this first is never half done by a cancel."""
    result = await conn.execute(
        update(agent_runs)
        .where(agent_runs.c.id == run_id, agent_runs.c.status == AgentRunStatus.RUNNING.value)
        .values(updated_at=now)
    )
    return result.rowcount > 0


async def is_cancelled(conn: AsyncConnection, run_id: str) -> bool:
    """Whether the run was cancelled (its stepping stops before the next model call)."""
    status = await conn.scalar(select(agent_runs.c.status).where(agent_runs.c.id == run_id))
    return status == AgentRunStatus.CANCELLED.value


async def finish_run(
    conn: AsyncConnection,
    run_id: str,
    status: AgentRunStatus,
    now: datetime,
    *,
    stop_reason: str,
    error: str | None = None,
) -> bool:
    """An open run ends with ``status``; False when it had already ended (a cancel stays a cancel)."""
    result = await conn.execute(
        update(agent_runs)
        .where(agent_runs.c.id == run_id, agent_runs.c.status.in_(OPEN))
        .values(status=status.value, stop_reason=stop_reason, error=error, completed_at=now, updated_at=now)
    )
    return result.rowcount > 0


async def cancel_runs(
    conn: AsyncConnection,
    org_id: str,
    agent_id: str,
    run_ids: Sequence[str] | None,
    now: datetime,
    *,
    error: str | None = None,
) -> list[str]:
    """Cancel the agent's open runs (all, or those of ``run_ids``), saying why with ``error`` if
    given; returns the ids cancelled."""
    where = [
        agent_runs.c.organization_id == org_id,
        agent_runs.c.agent_id == agent_id,
        agent_runs.c.status.in_(OPEN),
    ]
    if run_ids is not None:
        where.append(agent_runs.c.id.in_(list(run_ids)))
    ids = [str(i) for i in await conn.scalars(select(agent_runs.c.id).where(*where))]
    if ids:
        await conn.execute(
            update(agent_runs)
            .where(agent_runs.c.id.in_(ids), agent_runs.c.status.in_(OPEN))
            .values(
                status=AgentRunStatus.CANCELLED.value,
                stop_reason="cancelled",
                error=error,
                completed_at=now,
                updated_at=now,
            )
        )
    return ids


async def runs_of_agent(conn: AsyncConnection, org_id: str, agent_id: str, run_ids: Sequence[str]) -> set[str]:
    """Which of ``run_ids`` are runs of the agent, open or ended."""
    query = select(agent_runs.c.id).where(
        agent_runs.c.organization_id == org_id, agent_runs.c.agent_id == agent_id, agent_runs.c.id.in_(list(run_ids))
    )
    return {str(i) for i in await conn.scalars(query)}


async def fail_interrupted(conn: AsyncConnection, now: datetime, *, agent_id: str | None = None) -> int:
    """Fail the open runs that no process is stepping: their agent holds no synchronous step.

    With ``agent_id`` (called by a step that has just taken that agent's hold, so any other open
    run of the agent is dead), only that agent's runs that are already running.
    """
    if agent_id is not None:
        where = [agent_runs.c.agent_id == agent_id, agent_runs.c.status == AgentRunStatus.RUNNING.value]
    else:
        unheld = select(agents.c.id).where(or_(agents.c.stepping_until.is_(None), agents.c.stepping_until < now))
        # A background run under a live lease is another process's, still to start its step.
        unleased = or_(agent_runs.c.lease_until.is_(None), agent_runs.c.lease_until < now)
        where = [
            agent_runs.c.status.in_(OPEN),
            agent_runs.c.agent_id.in_(unheld),
            agent_runs.c.updated_at < now,
            unleased,
        ]
    result = await conn.execute(
        update(agent_runs)
        .where(*where)
        .values(
            status=AgentRunStatus.FAILED.value,
            stop_reason="error",
            error="the server stopped while the run was stepping (found at the next start)",
            completed_at=now,
            updated_at=now,
        )
    )
    return result.rowcount


LOST = "the server process stepping the run stopped (its lease expired)"


async def renew_leases(conn: AsyncConnection, run_ids: Sequence[str], until: datetime) -> None:
    """The process stepping these background runs is alive: their leases last until ``until``."""
    if run_ids:
        await conn.execute(
            update(agent_runs)
            .where(agent_runs.c.id.in_(list(run_ids)), agent_runs.c.status.in_(OPEN))
            .values(lease_until=until)
        )


async def fail_expired(conn: AsyncConnection, now: datetime, *, run_id: str | None = None) -> list[AgentRun]:
    """Fail the open background runs whose lease expired before ``now`` (all, or ``run_id``);
    returns them as they were, so that the caller lets go of the agents of those that were running."""
    where = [agent_runs.c.status.in_(OPEN), agent_runs.c.lease_until < now]
    if run_id is not None:
        where.append(agent_runs.c.id == run_id)
    failed: list[AgentRun] = []
    for run in [to_run(r) for r in await conn.execute(select(agent_runs).where(*where))]:
        # One compare-and-set each (they are few): a run another process failed meanwhile is not ours to tell.
        result = await conn.execute(
            update(agent_runs)
            .where(agent_runs.c.id == run.id, *where)
            .values(
                status=AgentRunStatus.FAILED.value, stop_reason="error", error=LOST, completed_at=now, updated_at=now
            )
        )
        if result.rowcount:
            failed.append(run)
    return failed


async def record_callback(
    conn: AsyncConnection, run_id: str, *, sent_at: datetime, status_code: int | None, error: str | None
) -> None:
    """What the last attempt to POST the run's callback_url gave."""
    await conn.execute(
        update(agent_runs)
        .where(agent_runs.c.id == run_id)
        .values(callback_sent_at=sent_at, callback_status_code=status_code, callback_error=error)
    )
