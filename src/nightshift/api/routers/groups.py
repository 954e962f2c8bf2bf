"""/v1/groups: sleep-time groups (a main agent and its sleep-time agent), and stepping the due ones now."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import Field

from nightshift.api.batch_views import BatchRunPublic, batch_run_json, json_response
from nightshift.api.deps import Conn, Now, Org, ReadConn, State
from nightshift.api.group_schemas import GroupCreate, GroupPublic, GroupUpdate
from nightshift.api.input import Body
from nightshift.api.letta_messages import to_letta_messages
from nightshift.api.routers.agent_messages import ShownView
from nightshift.api.routers.params import PageQuery
from nightshift.domain.groups import ManagerType
from nightshift.domain.pagination import Page
from nightshift.errors import InvalidInput
from nightshift.services import groups

router = APIRouter(tags=["groups"])


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
async def create_group(body: GroupCreate, conn: Conn, org: Org, now: Now) -> GroupPublic:
    """Make a sleep-time group of agents that exist: ``manager_config.manager_agent_id`` is the
    main agent (the one the user talks to), ``agent_ids`` its sleep-time agents. Without
    ``sleeptime_agent_frequency`` they run after every turn of the main agent, as in Letta.

    Other manager types (round_robin, Letta's default, supervisor, dynamic, voice_sleeptime,
    swarm) are a 422; a main agent that manages a group already is a 409.
    """
    return GroupPublic.of(await groups.create_group(conn, org, body.to_spec(), now=now))


@router.get("/v1/groups/", response_model=list[GroupPublic])
@router.get("/v1/groups", include_in_schema=False, response_model=list[GroupPublic])
async def list_groups(
    conn: ReadConn,
    org: Org,
    page: PageQuery,
    manager_type: Annotated[str | None, Query(max_length=64, description="Only groups of this manager type")] = None,
    show_hidden_groups: Annotated[bool, Query(description="Include the groups marked hidden")] = False,
) -> list[GroupPublic]:
    """A page of the organization's groups, oldest first (``order=desc`` for newest first); as
    Letta's, hidden groups only with ``show_hidden_groups``."""
    kind = None if manager_type is None else _listed_type(manager_type)
    found = await groups.list_groups(conn, org, page, manager_type=kind, show_hidden=show_hidden_groups)
    return [GroupPublic.of(g) for g in found]


def _listed_type(value: str) -> ManagerType:
    """A manager type to filter on: any of Letta's (the others simply have no groups here)."""
    try:
        return ManagerType(value)
    except ValueError:
        raise InvalidInput(
            f"unknown manager_type {value!r}; Letta's are {', '.join(t.value for t in ManagerType)}",
            field="query.manager_type",
        ) from None


@router.get("/v1/groups/{group_id}", response_model=GroupPublic)
async def get_group(group_id: str, conn: ReadConn, org: Org) -> GroupPublic:
    return GroupPublic.of(await groups.get_group(conn, org, group_id))


@router.patch("/v1/groups/{group_id}", response_model=GroupPublic)
async def update_group(group_id: str, body: GroupUpdate, conn: Conn, org: Org, now: Now) -> GroupPublic:
    """Change a group's agents, description, main agent, frequency or shared blocks; absent or
    null fields stay as they are. The same checks as on creation."""
    return GroupPublic.of(await groups.update_group(conn, org, group_id, body.to_changes(), now=now))


@router.delete("/v1/groups/{group_id}")
async def delete_group(group_id: str, conn: Conn, org: Org) -> dict[str, str]:
    """Delete a group; its agents stay (the main agent has no sleep-time agent any more, and the
    sleep-time agents are ordinary agents of type sleeptime_agent)."""
    await groups.delete_group(conn, org, group_id)
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
    """The group's conversation: its main agent's messages in Letta's shapes, newest first by
    default, paged as ``GET /v1/agents/{agent_id}/messages`` is (Letta's default page is 10)."""
    page = Page(before=before, after=after, limit=limit, order=order)
    messages = await groups.group_messages(conn, org, group_id, page)
    return [part for message in messages for part in to_letta_messages(message, view)]
