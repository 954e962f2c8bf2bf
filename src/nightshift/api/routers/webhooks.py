"""/v1/webhooks/...: the providers' word that a batch has ended, so that it is polled at once.

Public (the provider cannot send our credentials): each request is taken only with the
provider's signature, checked with the secret the provider gave for the endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from nightshift.api.credentials import WEBHOOK_PATH
from nightshift.api.deps import Now, State
from nightshift.api.errors import ERROR_RESPONSES
from nightshift.services import batch_runs

router = APIRouter(tags=["webhooks"], responses=ERROR_RESPONSES)


@router.post(WEBHOOK_PATH, status_code=204, response_class=Response)
async def openai_webhook(request: Request, state: State, now: Now) -> Response:
    """OpenAI's batch webhooks (``batch.completed``, ``failed``, ``expired``, ``cancelled``): the
    batch is polled at once by the first poller free, instead of at its next scheduled poll.
    Signed as OpenAI signs them (``OPENAI_WEBHOOK_SECRET``); other events are taken and ignored."""
    await batch_runs.openai_webhook(state.engine, await request.body(), request.headers, now)
    return Response(status_code=204)
