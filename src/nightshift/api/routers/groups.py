"""/v1/groups: sleep-time groups (a main agent and its sleep-time agent), and stepping the due ones now."""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import Field

from nightshift.api.batch_views import BatchRunPublic, batch_run_json, json_response
from nightshift.api.deps import Org, State
from nightshift.api.input import Body
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
