"""POST /v1/agents/{id}/messages/stream: the synchronous send, as Letta's server-sent events.

The same as ``POST /v1/agents/{id}/messages`` with ``streaming: true`` (see ``api.letta_stream``
for the events)::

    data: <message>            each message as its step is written (pieces with stream_tokens)
    data: {"message_type": "ping"}   with include_pings, after 30 s without a chunk
    data: <stop_reason>        then data: <usage_statistics>, then data: [DONE]

A request refused before the run writes anything (unknown agent, agent busy, no text) gets its
4xx as the non-streaming send does. An error once the stream has begun cannot change the status:
it ends the stream with a stop reason (``llm_api_error`` for the provider, else ``error``), an
``event: error`` whose data is Letta's error message, and ``[DONE]``, as Letta does; what the run
wrote before stays written. A client that goes away does not stop the run: it finishes and is
stored, as a non-streaming send would be. Every chunk but a ping carries ``run_id`` and
``seq_id``; with ``background: true`` the stream is stored and read from the database, and
``POST /v1/runs/{id}/stream`` reads it again (``api.run_stream``).
"""

from __future__ import annotations

from fastapi.responses import StreamingResponse

from nightshift.api.deps import Org, State
from nightshift.api.letta_stream import STREAMED
from nightshift.api.routers import secured
from nightshift.api.routers.agent_messages import SendMessages, send_messages

router = secured("agents")


@router.post("/v1/agents/{agent_id}/messages/stream", response_class=StreamingResponse, responses=STREAMED)
async def stream_messages(agent_id: str, body: SendMessages, state: State, org: Org) -> StreamingResponse:
    """Send messages to an agent and stream its run as server-sent events (Letta's stream).

    Each message is sent as its step completes, in the shapes of the non-streaming send; with
    ``stream_tokens`` the model's answer comes in pieces as it is written. Then the stop reason,
    the usage and ``[DONE]``. ``streaming`` is implied.
    """
    reply = await send_messages(agent_id, body.model_copy(update={"streaming": True}), state, org)
    assert isinstance(reply, StreamingResponse)  # streaming: true always streams
    return reply
