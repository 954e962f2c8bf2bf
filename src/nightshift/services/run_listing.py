"""Runs of both kinds as ``/v1/runs`` shows them: agent runs (a send to one agent) and batch runs
(shown with their first agent), read by id, listed by creation time, with their messages and the
tokens they used."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agent_runs import AgentRun
from nightshift.domain.messages import Message
from nightshift.domain.usage import Usage
from nightshift.errors import NotFound
from nightshift.store import agent_runs as agent_run_store
from nightshift.store import batch_run_views, run_listing
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import messages as message_store
from nightshift.store.pagination import Page
from nightshift.store.run_listing import Listed, ListedBatchRun, RunFilter


async def get_any_run(conn: AsyncConnection, org_id: str, run_id: str) -> Listed:
    """An agent run, or a batch run (shown with its first agent).

    Raises:
        NotFound: neither, in this organization.
    """
    run = await agent_run_store.get_run(conn, org_id, run_id)
    if run is not None:
        return run
    batch = await batch_run_store.get_run(conn, org_id, run_id)
    if batch is None:
        raise NotFound(f"run {run_id} not found")
    agents = await run_listing.first_agents(conn, [batch.id], ())
    return ListedBatchRun(run=batch, agent_id=agents.get(batch.id))


async def list_any_runs(conn: AsyncConnection, org_id: str, where: RunFilter, page: Page) -> list[Listed]:
    """A page of the organization's agent runs and batch runs, by creation time."""
    return await run_listing.list_runs(
        conn, org_id, where, after=page.after, before=page.before, limit=page.limit, ascending=page.order == "asc"
    )


async def messages_of_any_run(
    conn: AsyncConnection, org_id: str, run_id: str, page: Page
) -> tuple[Listed, list[Message]]:
    """The run and a page of the messages it wrote (for a batch run: of all its agents).

    Raises:
        NotFound: no such run in this organization.
    """
    run = await get_any_run(conn, org_id, run_id)
    if isinstance(run, AgentRun):
        return run, await message_store.list_run_messages(conn, run.id, page)
    return run, await batch_run_views.run_messages(conn, run.run.id, page)


async def usage_of_any_run(conn: AsyncConnection, org_id: str, run_id: str) -> RunUsage:
    """The tokens the run used, over all its steps (and, for a batch run, all its agents).

    Raises:
        NotFound: no such run in this organization.
    """
    run = await get_any_run(conn, org_id, run_id)
    if isinstance(run, AgentRun):
        return RunUsage(
            prompt=sum(s.prompt_tokens for s in run.steps),
            completion=sum(s.completion_tokens for s in run.steps),
            cache_read=sum(s.cache_read_tokens for s in run.steps),
            cache_write=sum(s.cache_write_tokens for s in run.steps),
        )
    usage = (await batch_run_views.run_progress(conn, run.run.id)).usage or Usage()
    cache_read, cache_write = usage.cache_read_tokens, usage.cache_write_tokens
    return RunUsage(
        prompt=usage.input_tokens + cache_read + cache_write,
        completion=usage.output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunUsage:
    """Tokens of a run; ``prompt`` counts the cached ones too."""

    prompt: int
    completion: int
    cache_read: int
    cache_write: int
