"""/v1/groups: sleep-time groups (a main agent and its sleep-time agent), and stepping the due ones now."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query, Response
from pydantic import Field

from nightshift.api.batch_views import BatchRunPublic, batch_run_json, json_response
from nightshift.api.deps import Conn, Now, Org, ReadConn, State
from nightshift.api.group_schemas import GroupCreate, GroupPublic, GroupUpdate, group_json
from nightshift.api.input import Body
from nightshift.api.letta_messages import to_letta_messages
from nightshift.api.routers import secured
from nightshift.api.routers.agent_messages import ShownView
from nightshift.api.routers.params import PageQuery
from nightshift.domain.groups import ManagerType, check_manager_type
from nightshift.domain.pagination import Page
from nightshift.domain.unset import UNSET
from nightshift.errors import InvalidInput
from nightshift.services import groups
from nightshift.services.groups import GroupChanges, GroupSpec

router = secured("groups")


class SleeptimeRunBody(Body):
    all: bool = Field(
        default=False,
        description="Step every sleep-time agent whose main agent said anything since its last run, due or not",
    )


@router.post("/v1/sleeptime/run", response_model=list[BatchRunPublic])
async def run_sleeptime(body: SleeptimeRunBody, state: State, org: Org) -> Response:
    """Step the organization's due sleep-time agents now, in batch runs of kind ``sleeptime`` (one
    per 10,000 agents), rather than when the poller next gathers them; ``all``: every one with
    anything new to read. A sleep-time agent still in its previous run stays due. Returns the runs
    queued (none when nothing is due)."""
    views = await groups.run_due(
        state.engine,
        state.clock,
        org,
        everything=body.all,
        max_steps=state.settings.default_max_steps,
        queued=state.runs_queued,
    )
    return json_response([batch_run_json(view) for view in views])


@router.post("/v1/groups/", response_model=GroupPublic)
@router.post("/v1/groups", include_in_schema=False, response_model=GroupPublic)
async def create_group(body: GroupCreate, conn: Conn, org: Org, now: Now) -> dict[str, Any]:
    """Make a sleep-time group of agents that exist: ``manager_config.manager_agent_id`` is the main
    agent, ``agent_ids`` its sleep-time agents (``enable_sleeptime`` on an agent makes both at once).
    The other manager types are a 422 that names them."""
    config = body.manager_config.checked()
    if config.manager_agent_id is None:
        raise InvalidInput("a sleeptime group needs manager_config.manager_agent_id", field="manager_config")
    spec = GroupSpec(
        agent_ids=body.agent_ids,
        manager_agent_id=config.manager_agent_id,
        description=body.description,
        sleeptime_agent_frequency=config.sleeptime_agent_frequency,
        shared_block_ids=body.shared_block_ids,
        hidden=body.hidden,
    )
    return group_json(await groups.create_group(conn, org, spec, now=now))


@router.get("/v1/groups/", response_model=list[GroupPublic])
@router.get("/v1/groups", include_in_schema=False, response_model=list[GroupPublic])
async def list_groups(
    conn: ReadConn,
    org: Org,
    page: PageQuery,
    manager_type: Annotated[str | None, Query(description="Only groups of this manager type")] = None,
    show_hidden_groups: Annotated[bool, Query(description="Include the groups marked hidden")] = False,
) -> list[dict[str, Any]]:
    """A page of the organization's groups, oldest first (``order=desc`` for newest); as Letta's,
    the groups made with ``hidden: true`` only with ``show_hidden_groups``."""
    kind = None if manager_type is None else _listed_type(manager_type)
    found = await groups.list_groups(conn, org, page, manager_type=kind, show_hidden=show_hidden_groups)
    return [group_json(g) for g in found]


def _listed_type(value: str) -> ManagerType:
    try:
        return ManagerType(value)
    except ValueError:
        return check_manager_type(value, field_name="manager_type")  # raises, naming the types


@router.get("/v1/groups/{group_id}", response_model=GroupPublic)
async def get_group(group_id: str, conn: ReadConn, org: Org) -> dict[str, Any]:
    return group_json(await groups.get_group(conn, org, group_id))


@router.patch("/v1/groups/{group_id}", response_model=GroupPublic)
async def update_group(group_id: str, body: GroupUpdate, conn: Conn, org: Org, now: Now) -> dict[str, Any]:
    """Change a group's agents, description, main agent or sleep-time frequency (fields left out or
    null stay as they are; ``manager_config.sleeptime_agent_frequency`` null keeps it too)."""
    config = None if body.manager_config is None else body.manager_config.checked()
    changes = GroupChanges(
        agent_ids=UNSET if body.agent_ids is None else body.agent_ids,
        description=UNSET if body.description is None else body.description,
        manager_agent_id=UNSET if config is None or config.manager_agent_id is None else config.manager_agent_id,
        sleeptime_agent_frequency=(
            UNSET if config is None or config.sleeptime_agent_frequency is None else config.sleeptime_agent_frequency
        ),
        shared_block_ids=UNSET if body.shared_block_ids is None else body.shared_block_ids,
    )
    return group_json(await groups.update_group(conn, org, group_id, changes, now=now))


@router.delete("/v1/groups/{group_id}")
async def delete_group(group_id: str, conn: Conn, org: Org, now: Now) -> dict[str, str]:
    """Delete the group; its agents stay, and its main agent has no sleep-time agent any more.
    Answers as Letta does, with a message naming the group."""
    await groups.delete_group(conn, org, group_id, now=now)
    return {"message": f"Group id={group_id} successfully deleted"}


@router.get("/v1/groups/{group_id}/messages")
async def list_group_messages(
    group_id: str,
    conn: ReadConn,
    org: Org,
    view: ShownView,
    before: Annotated[str | None, Query(description="A message id: the messages before it in the sort order")] = None,
    after: Annotated[str | None, Query(description="A message id: the messages after it in the sort order")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
) -> list[dict[str, Any]]:
    """The group's conversation, as Letta lists it: its main agent's messages in Letta's shapes,
    newest first and 10 a page by default (Letta's defaults), paged and shown as
    ``GET /v1/agents/{agent_id}/messages`` (``use_assistant_message`` and the rest). The
    sleep-time agents' own messages (the transcripts they read, their memory edits) are listed
    with them."""
    page = Page(before=before, after=after, limit=limit, order=order)
    messages = await groups.group_messages(conn, org, group_id, page)
    return [part for message in messages for part in to_letta_messages(message, view)]
