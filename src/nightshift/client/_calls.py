"""Every request of the client's resources, described once (``Call``), and the pure parts of the
methods that send several: paging and a run's results.

``Client`` and ``AsyncClient`` send these; nothing here does I/O.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from nightshift.client._http import Call
from nightshift.client.errors import Timeout
from nightshift.client.types import (
    AgentResult,
    AgentRun,
    ApiKey,
    ApiKeyCreated,
    BatchRequest,
    BatchRun,
    BatchRunAgent,
    BatchRunCosts,
    BatchTurnarounds,
    RunMessage,
    RunStep,
    RunUsage,
)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

Order = Literal["asc", "desc"]
BATCHES = "/v1/messages/batches"
DEFAULT_PAGE = 100
# wait()'s first pause (seconds); each next one doubles, up to its poll_interval.
FIRST_PAUSE = 0.25


def _one(model: type[M]) -> Callable[[Any], M]:
    return model.model_validate


def _many(model: type[M], key: str | None = None) -> Callable[[Any], list[M]]:
    adapter = TypeAdapter(list[model])  # type: ignore[valid-type]

    def read(body: Any) -> list[M]:
        items: list[M] = adapter.validate_python(body[key] if key is not None else body)
        return items

    return read


def _path(*parts: str) -> str:
    """A path with each id quoted as one segment."""
    return "/".join(quote(part, safe="") if i else part for i, part in enumerate(parts))


@dataclass(frozen=True, slots=True)
class Pages(Generic[T]):
    """A listing read page after page: ``call(cursor)`` asks for the page after ``cursor`` (None:
    the first), ``cursor_of`` gives the cursor an item leaves. A page shorter than ``size`` is the last."""

    call: Callable[[str | None], Call[list[T]]]
    cursor_of: Callable[[T], str]
    size: int

    def next_cursor(self, page: Sequence[T]) -> str | None:
        """The cursor of the next page, or None when ``page`` was the last."""
        if len(page) < self.size or not page:
            return None
        return self.cursor_of(page[-1])


def _page_size(limit: int) -> int:
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit is a page size from 1 to 1000, got {limit}")
    return limit


# --- batches -------------------------------------------------------------------------------------


def create_batch(
    requests: Iterable[BatchRequest | Mapping[str, Any]],
    *,
    metadata: Mapping[str, Any] | None,
    name: str | None,
    callback_url: str | None,
    idempotency_key: str | None,
    deadline: datetime | None = None,
    finish_within_seconds: float | None = None,
) -> Call[BatchRun]:
    """``POST /v1/messages/batches``, with an Idempotency-Key made here when none is given, so
    that the client's own retries of it never make a second run."""
    body_requests = [r.model_dump(exclude_none=True) if isinstance(r, BatchRequest) else dict(r) for r in requests]
    run_metadata = dict(metadata or {})
    if name is not None:
        run_metadata["name"] = name
    body: dict[str, Any] = {"requests": body_requests}
    if run_metadata:
        body["metadata"] = run_metadata
    if callback_url is not None:
        body["callback_url"] = callback_url
    if deadline is not None:
        body["deadline"] = deadline.isoformat()
    if finish_within_seconds is not None:
        body["finish_within_seconds"] = finish_within_seconds
    key = idempotency_key or str(uuid.uuid4())
    return Call(
        method="POST",
        path=BATCHES,
        json=body,
        headers={"Idempotency-Key": key},
        read=_one(BatchRun),
        retry_sent=True,
    )


def retrieve_batch(run_id: str) -> Call[BatchRun]:
    return Call(method="GET", path=_path(BATCHES, run_id), read=_one(BatchRun))


def cancel_batch(run_id: str) -> Call[BatchRun]:
    # Cancelling twice is cancelling once: safe to send again.
    return Call(method="PATCH", path=_path(BATCHES, run_id, "cancel"), read=_one(BatchRun))


def list_batches(
    *,
    status: str | Sequence[str] | None,
    has_failures: bool | None,
    kind: str | None = None,
    order: Order,
    limit: int,
) -> Pages[BatchRun]:
    statuses = [status] if isinstance(status, str) else list(status) if status is not None else None
    size = _page_size(limit)
    read = _many(BatchRun)

    def call(after: str | None) -> Call[list[BatchRun]]:
        params = {
            "status": statuses,
            "has_failures": _flag(has_failures),
            "kind": kind,
            "order": order,
            "limit": size,
            "after": after,
        }
        return Call(method="GET", path=BATCHES, params=params, read=read)

    return Pages(call=call, cursor_of=lambda run: run.id, size=size)


def batch_costs() -> Call[BatchRunCosts]:
    return Call(method="GET", path=_path(BATCHES, "costs"), read=_one(BatchRunCosts))


def batch_turnaround() -> Call[BatchTurnarounds]:
    return Call(method="GET", path=_path(BATCHES, "turnaround"), read=_one(BatchTurnarounds))


def run_sleeptime(*, everything: bool) -> Call[list[BatchRun]]:
    """``POST /v1/sleeptime/run``, safe to send again: a second one finds the agents the first
    queued already gathered (or still due, if it never arrived)."""
    return Call(
        method="POST", path="/v1/sleeptime/run", json={"all": everything}, read=_many(BatchRun), retry_sent=True
    )


def batch_agents(run_id: str, *, limit: int) -> Pages[BatchRunAgent]:
    size = _page_size(limit)
    read = _many(BatchRunAgent, "agents")

    def call(after: str | None) -> Call[list[BatchRunAgent]]:
        return Call(
            method="GET", path=_path(BATCHES, run_id, "agents"), params={"limit": size, "after": after}, read=read
        )

    return Pages(call=call, cursor_of=lambda agent: agent.agent_id, size=size)


def batch_messages(run_id: str, *, agent_id: str | None, order: Order, limit: int) -> Pages[RunMessage]:
    size = _page_size(limit)
    read = _many(RunMessage, "messages")

    def call(after: str | None) -> Call[list[RunMessage]]:
        params = {"agent_id": agent_id, "order": order, "limit": size, "after": after}
        return Call(method="GET", path=_path(BATCHES, run_id, "messages"), params=params, read=read)

    return Pages(call=call, cursor_of=lambda message: message.id, size=size)


def agents_named(name: str) -> Call[list[str]]:
    """The ids of the agents called ``name`` (two at most: one is what a request needs)."""
    return Call(
        method="GET",
        path="/v1/agents/",
        params={"name": name, "limit": 2, "include": "agent.tags"},
        read=lambda body: [str(agent["id"]) for agent in body],
    )


def results(agents: Sequence[BatchRunAgent], messages: Sequence[RunMessage]) -> list[AgentResult]:
    """Per agent of a run, what it came to: its replies (the text of its assistant messages, or
    the message of its ``send_message`` calls), state, tokens, cost and messages."""
    by_agent: dict[str, list[RunMessage]] = {}
    for message in messages:
        by_agent.setdefault(message.agent_id, []).append(message)
    found = []
    for agent in agents:
        mine = sorted(by_agent.get(agent.agent_id, []), key=lambda m: (m.created_at, m.id))
        found.append(
            AgentResult(
                agent_id=agent.agent_id,
                agent_name=agent.agent_name,
                state=agent.state,
                steps=agent.steps,
                replies=[reply for m in mine if m.role == "assistant" for reply in _replies(m)],
                usage=agent.usage,
                cost_usd=agent.cost_usd,
                error=agent.error,
                messages=mine,
            )
        )
    return found


def _replies(message: RunMessage) -> list[str]:
    found = [message.text] if message.text else []
    for call in message.tool_calls:
        if call.function.name != "send_message":
            continue
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            continue
        if isinstance(arguments, dict) and isinstance(arguments.get("message"), str):
            found.append(arguments["message"])
    return found


# --- runs -----------------------------------------------------------------------------------------


def list_runs(
    *,
    agent_id: str | None,
    statuses: Sequence[str] | None,
    background: bool | None,
    active: bool,
    stop_reason: str | None,
    order: Order,
    limit: int,
) -> Pages[AgentRun]:
    size = _page_size(limit)
    read = _many(AgentRun)

    def call(after: str | None) -> Call[list[AgentRun]]:
        params = {
            "agent_id": agent_id,
            "statuses": list(statuses) if statuses else None,
            "background": _flag(background),
            "active": "true" if active else None,
            "stop_reason": stop_reason,
            "order": order,
            "limit": size,
            "after": after,
        }
        return Call(method="GET", path="/v1/runs", params=params, read=read)

    return Pages(call=call, cursor_of=lambda run: run.id, size=size)


def retrieve_run(run_id: str) -> Call[AgentRun]:
    return Call(method="GET", path=_path("/v1/runs", run_id), read=_one(AgentRun))


def run_messages(run_id: str, *, order: Order, limit: int) -> Pages[dict[str, Any]]:
    """Letta's messages of a run (a union of message types: returned as dicts, each with its
    ``message_type``). Its own parts share the message's id, so the cursor is the last id seen."""
    size = _page_size(limit)

    def call(after: str | None) -> Call[list[dict[str, Any]]]:
        params = {"order": order, "limit": size, "after": after}
        return Call(method="GET", path=_path("/v1/runs", run_id, "messages"), params=params, read=_dicts)

    return Pages(call=call, cursor_of=lambda message: str(message["id"]), size=size)


def _dicts(body: Any) -> list[dict[str, Any]]:
    return [dict(item) for item in body]


def run_steps(run_id: str, *, order: Order, limit: int) -> Pages[RunStep]:
    size = _page_size(limit)
    read = _many(RunStep)

    def call(after: str | None) -> Call[list[RunStep]]:
        params = {"order": order, "limit": size, "after": after}
        return Call(method="GET", path=_path("/v1/runs", run_id, "steps"), params=params, read=read)

    return Pages(call=call, cursor_of=lambda step: step.id, size=size)


def run_usage(run_id: str) -> Call[RunUsage]:
    return Call(method="GET", path=_path("/v1/runs", run_id, "usage"), read=_one(RunUsage))


# --- keys -----------------------------------------------------------------------------------------


def create_key(*, name: str | None, is_admin: bool) -> Call[ApiKeyCreated]:
    body: dict[str, Any] = {"is_admin": is_admin}
    if name is not None:
        body["name"] = name
    # Not sent again once it left: a second key would be made, and its secret lost.
    return Call(method="POST", path="/v1/keys/", json=body, read=_one(ApiKeyCreated), retry_sent=False)


def list_keys() -> Call[list[ApiKey]]:
    return Call(method="GET", path="/v1/keys/", read=_many(ApiKey))


def revoke_key(key_id: str) -> Call[ApiKey]:
    return Call(method="DELETE", path=_path("/v1/keys", key_id), read=_one(ApiKey))


def _flag(value: bool | None) -> str | None:
    return None if value is None else "true" if value else "false"


def next_look(
    run: BatchRun, deadline: float | None, looks: int, *, poll_interval: float, timeout: float | None
) -> float | None:
    """``wait``'s decision after look number ``looks`` (from 0) at ``run``: None when it has ended,
    else the seconds until the next look. The first pauses are short and double up to
    ``poll_interval``, so that a run that ends at once is not waited on for a whole interval.

    Raises:
        Timeout: ``deadline`` (a ``time.monotonic()``) passed first; the run goes on.
    """
    if run.is_final:
        return None
    pause = min(poll_interval, FIRST_PAUSE * 2.0**looks)
    if deadline is None:
        return pause
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout(f"batch run {run.id} is still {run.status} after {timeout:g} s (it goes on)")
    return min(pause, left)
