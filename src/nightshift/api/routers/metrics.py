"""``GET /metrics``: Prometheus's text format, for the server password only when one is set."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from nightshift.api.deps import Now, State, operator
from nightshift.api.errors import OPERATOR_ERROR_RESPONSES
from nightshift.services.metrics import exposition

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    dependencies=[Depends(operator)],
    response_class=Response,
    responses={
        200: {"description": "The metrics, in Prometheus's text format", "content": {"text/plain": {}}},
        **OPERATOR_ERROR_RESPONSES,
    },
)
async def metrics(state: State, now: Now) -> Response:
    """This process's figures (stage durations, provider errors, tokens and cost, sandbox calls; its
    child poller's added in) and the cluster's (runs and provider batches by status, agents stepping, poller lag)."""
    child = state.poller_process.figures() if state.poller_process is not None else []
    figures = await exposition(state.engine, state.metrics, now=now, others=child)
    return Response(figures, media_type=CONTENT_TYPE_PLAIN_0_0_4)
