"""A synchronous run as Letta's server-sent events (``POST /v1/agents/{id}/messages/stream``).

``LettaStream`` is the run's ``SyncListener``: it turns what the run reports into Letta's stream
chunks (JSON objects) on a queue that the route reads. Without ``stream_tokens`` each message the
run writes is sent whole, in the shapes of the non-streaming send, as its step completes. With
``stream_tokens`` the model's answer is sent as it is written, in pieces that share the id of the
assistant message they become, as Letta sends them: ``reasoning_message`` pieces of the call's
``inner_thoughts``, ``assistant_message`` pieces of send_message's ``message`` (and of a plain text
answer), ``tool_call_message`` pieces of another call's arguments (the first one with the tool's
name and call id); the rest of the step's messages (tool returns, heartbeats) follow whole. Joined
in order, the pieces of a part are exactly that part of the stored message: what the model's
pieces did not show (a number still being written, the reasoning of a turn's later calls) is
sent once the step is written. The pieces follow the send's view as whole messages do: the
assistant tool and argument it names (or none, without ``use_assistant_message``), and only the
message types of ``include_return_message_types``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fastapi.responses import StreamingResponse

from nightshift.api.deps import AppState
from nightshift.api.input import Body
from nightshift.api.letta_messages import DEFAULT_VIEW, LettaView, to_letta_messages, usage_statistics
from nightshift.api.partial_json import partial_object
from nightshift.clock import Clock
from nightshift.domain.messages import Message, MessageKind, Role
from nightshift.domain.run_chunks import ChunkKind
from nightshift.errors import NightshiftError, ProviderError
from nightshift.ids import new_id
from nightshift.providers.agent_arguments import INNER_THOUGHTS, REQUEST_HEARTBEAT
from nightshift.providers.base import TextDelta, ToolCallDelta
from nightshift.runtime.sync import SyncResult
from nightshift.services.agent_runs import Send, letta_stop_reason, send_now

log = logging.getLogger(__name__)

Chunk = dict[str, Any]
DONE: Final = "data: [DONE]\n\n"
PING: Final[Chunk] = {"message_type": "ping"}  # what _next returns when it is time for a ping

# The OpenAPI description of a streamed 200.
STREAMED: Final[dict[int | str, dict[str, Any]]] = {
    200: {
        "description": "Letta's response; its server-sent events when streamed",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}

# Runs whose client went away: held here until they finish (the event loop keeps only weak references).
_DETACHED: set[asyncio.Task[SyncResult]] = set()


class StreamOptions(Body):
    """How to answer a send: Letta's ``streaming``, ``stream_tokens``, ``include_pings``, ``background``.

    ``background`` (with ``streaming``) steps the run in the background, its stream stored: the
    client that goes away does not stop it, and any client reads it again from any chunk
    (``POST /v1/runs/{id}/stream``). See ``api.run_stream``.
    """

    streaming: bool = False
    stream_tokens: bool = False
    include_pings: bool = False
    background: bool = False


async def streamed_run(
    state: AppState,
    org: str,
    send: Send,
    *,
    options: StreamOptions,
    view: LettaView,
) -> StreamingResponse:
    """Start the run of a send (an agent run, as the non-streaming send's) and answer with its
    server-sent events, its messages shown in ``view``.

    Raises:
        NightshiftError: the run was refused before it wrote anything (as ``send_now`` raises).
    """
    listener = LettaStream(send.agent_id, tokens=options.stream_tokens, clock=state.clock, view=view)
    run_id = new_id("run")

    async def stepped() -> SyncResult:
        _, result = await send_now(state.stepping, org, send, listener=listener, run_id=run_id)
        return result

    run = asyncio.create_task(stepped())
    try:
        first = await _next(listener, run, ping_after=None)
    except BaseException:
        _detach(run)  # the client left before the first event: the run goes on
        raise
    refused = run.exception() if first is None else None
    if refused is not None:
        # Nothing was written: refused as the non-streaming send refuses it.
        raise refused
    return StreamingResponse(
        sse_events(
            listener,
            run,
            first,
            ping_every=state.settings.stream_ping_seconds if options.include_pings else None,
            run_id=run_id,
            clock=state.clock,
        ),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@dataclass(slots=True)
class _Call:
    """What has been received, and sent, of one tool call of a streamed answer."""

    id: str = ""
    name: str = ""
    text: list[str] = field(default_factory=list)
    reasoning: str = ""  # the call's inner_thoughts sent so far
    said: str = ""  # send_message's message sent so far
    arguments: str = ""  # the arguments (without the agent arguments) sent so far


@dataclass(slots=True)
class _Answer:
    """What has been sent of one streamed answer (one assistant message)."""

    calls: dict[int, _Call] = field(default_factory=dict)
    text: str = ""
    reasoning: str = ""  # every call's reasoning sent, in the order sent


class LettaStream:
    """A ``SyncListener`` that queues Letta's stream chunks for the run it hears.

    Args:
        agent_id: The agent the run steps.
        tokens: Whether the answers stream in pieces (Letta's ``stream_tokens``).
    """

    def __init__(self, agent_id: str, *, tokens: bool, clock: Clock, view: LettaView = DEFAULT_VIEW) -> None:
        self._agent_id = agent_id
        self._clock = clock  # each chunk's date
        self._tokens = tokens
        self._view = view
        self._answers: dict[str, _Answer] = {}
        self.chunks: asyncio.Queue[Chunk] = asyncio.Queue()

    @property
    def tokens(self) -> bool:
        """Whether the answers stream in pieces."""
        return self._tokens

    async def messages(self, messages: Sequence[Message]) -> None:
        """Queue the messages a step wrote; a streamed answer only gets what its pieces did not show."""
        for message in messages:
            answer = self._answers.pop(message.id, None)
            if answer is None:
                for part in to_letta_messages(message, self._view):
                    self.chunks.put_nowait(part)
            else:
                for chunk in self._rest(message, answer):
                    self._put(chunk)

    async def delta(self, message_id: str, delta: TextDelta | ToolCallDelta) -> None:
        """Queue the chunks one piece of an answer makes."""
        answer = self._answers.setdefault(message_id, _Answer())
        for chunk in self._pieces(message_id, answer, delta):
            self._put(chunk)

    def _put(self, chunk: Chunk) -> None:
        """Queue a piece, unless the send asked for other message types only."""
        if self._view.types is None or chunk["message_type"] in self._view.types:
            self.chunks.put_nowait(chunk)

    def _says(self, tool: str) -> bool:
        """Whether a call of ``tool`` is shown as the assistant's message, in the send's view."""
        return self._view.use_assistant_message and tool == self._view.assistant_tool

    def _chunk(self, message_id: str, message_type: str, **fields: Any) -> Chunk:
        return {
            "id": message_id,
            "date": self._clock.now().isoformat(),
            "message_type": message_type,
            "name": None,
            "agent_id": self._agent_id,
            "batch_item_id": None,
            **fields,
        }

    def _pieces(self, message_id: str, answer: _Answer, delta: TextDelta | ToolCallDelta) -> list[Chunk]:
        if isinstance(delta, TextDelta):
            answer.text += delta.text
            return [self._chunk(message_id, "assistant_message", content=delta.text)] if delta.text else []
        call = answer.calls.setdefault(delta.index, _Call())
        out: list[Chunk] = []
        call.id = delta.id or call.id
        call.name += delta.name or ""
        call.text.append(delta.arguments)
        members, open_member = partial_object("".join(call.text))
        thoughts = _string_so_far(members, open_member, INNER_THOUGHTS)
        # The first call's thoughts stream; a later call's (joined, or dropped when the same) come
        # with the stored message.
        if delta.index == 0 and thoughts.startswith(call.reasoning) and len(thoughts) > len(call.reasoning):
            new = thoughts[len(call.reasoning) :]
            call.reasoning = thoughts
            answer.reasoning += new
            out.append(self._chunk(message_id, "reasoning_message", reasoning=new))
        if self._says(call.name):
            said = _string_so_far(members, open_member, self._view.assistant_kwarg)
            if said.startswith(call.said) and len(said) > len(call.said):
                out.append(self._chunk(message_id, "assistant_message", content=said[len(call.said) :]))
                call.said = said
            return out
        # The call starts (with its name) once its own arguments do, after the reasoning before them.
        shown = arguments_so_far(members, open_member)
        if shown != "{" and shown.startswith(call.arguments) and len(shown) > len(call.arguments):
            out.append(self._tool_call(message_id, call, shown[len(call.arguments) :]))
            call.arguments = shown
        return out

    def _tool_call(self, message_id: str, call: _Call, arguments: str) -> Chunk:
        tool_call = {"name": call.name, "arguments": arguments, "tool_call_id": call.id}
        return self._chunk(message_id, "tool_call_message", tool_call=tool_call)

    def _rest(self, message: Message, answer: _Answer) -> list[Chunk]:
        """What the pieces of ``answer`` did not show of the stored assistant ``message``."""
        if message.role is not Role.ASSISTANT:
            return to_letta_messages(message, self._view)
        out: list[Chunk] = []
        reasoning = message.reasoning or ""
        if reasoning.startswith(answer.reasoning) and len(reasoning) > len(answer.reasoning):
            out.append(self._chunk(message.id, "reasoning_message", reasoning=reasoning[len(answer.reasoning) :]))
        if message.text.startswith(answer.text) and len(message.text) > len(answer.text):
            out.append(self._chunk(message.id, "assistant_message", content=message.text[len(answer.text) :]))
        for index, stored in enumerate(message.tool_calls):
            call = answer.calls.get(index, _Call(id=stored.id, name=stored.name))
            if self._says(stored.name):
                said = _said(stored.arguments, self._view.assistant_kwarg)
                if said is not None:
                    if said.startswith(call.said) and len(said) > len(call.said):
                        out.append(self._chunk(message.id, "assistant_message", content=said[len(call.said) :]))
                    continue
            if not call.arguments or not stored.arguments.startswith(call.arguments):
                call = _Call(id=stored.id, name=stored.name)  # nothing of it was shown as it is stored
            if not call.arguments or len(stored.arguments) > len(call.arguments):
                out.append(self._tool_call(message.id, call, stored.arguments[len(call.arguments) :]))
        if message.kind is MessageKind.APPROVAL_REQUEST:
            # The calls wait for the client: the request that names them comes whole, at the end.
            out = [c for c in out if c["message_type"] != "tool_call_message"]
            out += [
                p for p in to_letta_messages(message, self._view) if p["message_type"] == "approval_request_message"
            ]
        return out


async def _next(listener: LettaStream, run: asyncio.Task[SyncResult], *, ping_after: float | None) -> Chunk | None:
    """The next chunk; PING after ``ping_after`` seconds without one; None once the run is over and all is sent."""
    queue = listener.chunks
    if not queue.empty():
        return queue.get_nowait()
    if run.done():
        return None
    getter = asyncio.ensure_future(queue.get())
    try:
        await asyncio.wait({getter, run}, timeout=ping_after, return_when=asyncio.FIRST_COMPLETED)
    finally:
        getter.cancel()
    if getter.done() and not getter.cancelled():
        return getter.result()
    if not queue.empty():
        return queue.get_nowait()
    return None if run.done() else PING


async def sse_events(
    listener: LettaStream,
    run: asyncio.Task[SyncResult],
    first: Chunk | None,
    *,
    ping_every: float | None,
    run_id: str,
    clock: Clock,
) -> AsyncIterator[str]:
    """The server-sent events of the run ``run_id``: its chunks from ``first`` on, numbered, then
    its end (see the module)."""
    seq_id = 0
    try:
        chunk = first if first is not None else await _next(listener, run, ping_after=ping_every)
        while chunk is not None:
            if chunk is PING:
                yield _data(ping(clock))
            else:
                seq_id += 1
                yield _data({**chunk, "run_id": run_id, "seq_id": seq_id})
            chunk = await _next(listener, run, ping_after=ping_every)
        error = run.exception()
        outcome: SyncResult | BaseException = run.result() if error is None else error
        for kind, data in ending(run_id, outcome):
            seq_id += 1
            yield sse(kind, None if data is None else {**data, "run_id": run_id, "seq_id": seq_id})
    finally:
        _detach(run)


def ping(clock: Clock) -> Chunk:
    """Letta's keep-alive chunk (not numbered: it is not part of the run's stream)."""
    return {"message_type": "ping", "id": new_id("ping"), "date": clock.now().isoformat()}


def ending(run_id: str, outcome: SyncResult | BaseException) -> list[tuple[ChunkKind, Chunk | None]]:
    """The last chunks of a run's stream: the stop reason and the usage, or the error; then DONE."""
    if isinstance(outcome, SyncResult):
        stop = {"message_type": "stop_reason", "stop_reason": letta_stop_reason(outcome)}
        return [(ChunkKind.DATA, stop), (ChunkKind.DATA, usage_statistics(outcome)), (ChunkKind.DONE, None)]
    stop_reason, error = _error_of(outcome, run_id)
    stop = {"message_type": "stop_reason", "stop_reason": stop_reason}
    return [(ChunkKind.DATA, stop), (ChunkKind.ERROR, error), (ChunkKind.DONE, None)]


def sse(kind: ChunkKind, data: Chunk | None) -> str:
    """One chunk of a stream as its server-sent event."""
    if kind is ChunkKind.DONE:
        return DONE
    if kind is ChunkKind.ERROR:
        return f"event: error\ndata: {json.dumps(data)}\n\n"
    return _data(data or {})


def _detach(run: asyncio.Task[SyncResult]) -> None:
    """Keep a run whose client left until it finishes."""
    if not run.done():
        _DETACHED.add(run)
        run.add_done_callback(_forget)


def _forget(run: asyncio.Task[SyncResult]) -> None:
    _DETACHED.discard(run)
    if not run.cancelled() and (error := run.exception()) is not None and not isinstance(error, NightshiftError):
        log.error("a streamed run failed after its client left", exc_info=error)


def _error_of(error: BaseException, run_id: str) -> tuple[str, Chunk]:
    """Letta's stop reason and error message of a stream that failed (the message is the
    payload of its ``event: error``)."""
    if isinstance(error, ProviderError):
        stop, kind, message = "llm_api_error", "llm_api_error", str(error)
    elif isinstance(error, NightshiftError):
        stop, kind, message = "error", "internal_error", str(error)
    else:
        log.error("a streamed run failed", exc_info=error)
        stop, kind, message = "error", "internal_error", "An error occurred during agent execution."
    detail = error.kind if isinstance(error, ProviderError) else None
    payload = {
        "message_type": "error_message",
        "run_id": run_id,
        "error_type": kind,
        "message": message,
        "detail": detail,
    }
    return stop, payload


def _data(chunk: Chunk) -> str:
    return f"data: {json.dumps(chunk)}\n\n"


def _said(arguments: str, kwarg: str) -> str | None:
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    said = value.get(kwarg) if isinstance(value, dict) else None
    return said if isinstance(said, str) else None


def _string_so_far(members: dict[str, Any], open_member: tuple[str, str] | None, key: str) -> str:
    """The text of the string member ``key`` as far as it has been written ('' if not yet)."""
    if open_member is not None and open_member[0] == key:
        return open_member[1]
    value = members.get(key)
    return value if isinstance(value, str) else ""


def arguments_so_far(members: dict[str, Any], open_member: tuple[str, str] | None) -> str:
    """The start of the arguments' JSON text without the agent arguments, as it will be stored.

    The stored text is ``json.dumps`` of the remaining object (``agent_arguments``), so the
    members written so far, in order, then the open string member's text so far, are its start.
    """
    parts = [
        f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
        for key, value in members.items()
        if key not in (INNER_THOUGHTS, REQUEST_HEARTBEAT)
    ]
    if open_member is not None and open_member[0] not in (INNER_THOUGHTS, REQUEST_HEARTBEAT):
        key, text = open_member
        parts.append(f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(text, ensure_ascii=False)[:-1]}")
    return "{" + ", ".join(parts)
