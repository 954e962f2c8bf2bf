"""Read and check a requests file (JSON Lines) before a batch run is created from it.

One request per line, in the API's shape: ``{"agent_id": ..., "messages": [{"role", "content"}]}``
or ``{"agent_id": ..., "input": "..."}``, with an optional ``max_steps``. ``agent_name`` may stand
in for ``agent_id``; it is looked up later, through the server. Blank lines are skipped. Every
problem is one line naming the file and the line: ``requests.jsonl:7: not JSON (...)``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from nightshift.client.errors import InvalidRequestsFile, dotted
from nightshift.client.types import BatchRequest

REQUEST_KEYS = ("agent_id", "agent_name", "messages", "input", "max_steps", "client_tools")

# Checks one request (its agent id stands in for a name) and says what is wrong, or None.
Check = Callable[[dict[str, Any]], str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLine:
    """One checked request: its line, the body for the API (without the agent) and who it is for."""

    line: int
    agent_id: str | None
    agent_name: str | None
    body: dict[str, Any]

    def with_agent(self, agent_id: str) -> dict[str, Any]:
        """The request as the API takes it, for ``agent_id``."""
        return {"agent_id": agent_id, **self.body}


def parse_requests(name: str, text: str, *, check: Check | None = None) -> list[RequestLine]:
    """Parse and check every line of ``text`` (the contents of the file called ``name``).

    Args:
        name: The file's name, for the messages.
        text: Its contents.
        check: A further check of each request (the server's own schema, where it is at hand);
            by default the client's ``BatchRequest`` checks the fields' types.

    Raises:
        InvalidRequestsFile: at the first bad line, saying which line and what is wrong.
    """
    found: list[RequestLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        found.append(_parse_line(name, number, raw, text, check or check_request))
    if not found:
        raise InvalidRequestsFile(f"{name}: no requests (expected one JSON object per line)")
    return found


def checked_by(model: type[BaseModel]) -> Check:
    """A check of a request's fields by ``model``: its first problem, as a requests file's line
    reports it (``'messages.0.role': input should be ...``), or None."""

    def check(request: dict[str, Any]) -> str | None:
        try:
            model.model_validate(request)
        except ValidationError as error:
            first = error.errors()[0]
            message = first["msg"]
            return f"'{dotted(first['loc'])}': {message[:1].lower()}{message[1:]}"
        return None

    return check


# The client's own check of a request's fields (the server checks the messages' shape).
check_request = checked_by(BatchRequest)


def _parse_line(name: str, number: int, raw: str, text: str, check: Check) -> RequestLine:
    where = f"{name}:{number}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        if _spread_over_lines(raw, text):
            raise InvalidRequestsFile(
                f"{where}: a JSON value spread over several lines; write one JSON object per line (JSON Lines)"
            ) from None
        raise InvalidRequestsFile(f"{where}: not JSON ({error.msg} at column {error.colno})") from None
    if isinstance(value, list) and all(isinstance(item, dict) for item in value) and value:
        raise InvalidRequestsFile(f"{where}: a JSON array of requests; write one JSON object per line (JSON Lines)")
    if not isinstance(value, dict):
        raise InvalidRequestsFile(f"{where}: expected a JSON object with 'agent_id' and 'messages', got {_kind(value)}")
    for key in value:
        if key not in REQUEST_KEYS:
            close = difflib.get_close_matches(key, REQUEST_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidRequestsFile(f"{where}: {key!r} is not a field of a request{hint}")
    agent_id, agent_name = value.get("agent_id"), value.get("agent_name")
    if agent_id is None and agent_name is None:
        raise InvalidRequestsFile(f"{where}: 'agent_id' is required (or 'agent_name')")
    if agent_id is not None and agent_name is not None:
        raise InvalidRequestsFile(f"{where}: give 'agent_id' or 'agent_name', not both")
    if agent_name is not None and (not isinstance(agent_name, str) or not agent_name):
        raise InvalidRequestsFile(f"{where}: 'agent_name': should be a name (a non-empty string)")
    body = {k: v for k, v in value.items() if k not in ("agent_id", "agent_name") and v is not None}
    # A name stands in for the agent id until it is looked up.
    problem = check({"agent_id": agent_id if agent_name is None else "-", **body})
    if problem is not None:
        raise InvalidRequestsFile(f"{where}: {problem}")
    if not body.get("messages") and body.get("input") is None:
        raise InvalidRequestsFile(f"{where}: 'messages' or 'input' is required")
    return RequestLine(line=number, agent_id=agent_id, agent_name=agent_name, body=body)


def _spread_over_lines(raw: str, text: str) -> bool:
    """Whether the file is pretty-printed JSON: a line opening an object or array that does not
    close on it, or a whole file that parses as one JSON value."""
    if raw.strip() in ("{", "["):
        return True
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def with_agent_ids(name: str, lines: Sequence[RequestLine], ids: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The requests with each ``agent_name`` replaced by its agent's id; one request per agent.

    Args:
        name: The file's name, for the messages.
        lines: The parsed requests.
        ids: For each name used, the ids of the agents that have it (one is expected).

    Raises:
        InvalidRequestsFile: a name matches no agent or several, or an agent appears twice.
    """
    requests: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    for line in lines:
        if line.agent_name is not None:
            matches = ids.get(line.agent_name, ())
            if len(matches) != 1:
                problem = (
                    f"several agents are named {line.agent_name!r}: give 'agent_id' instead"
                    if matches
                    else f"no agent is named {line.agent_name!r}"
                )
                raise InvalidRequestsFile(f"{name}:{line.line}: {problem}")
            agent_id = matches[0]
        else:
            agent_id = str(line.agent_id)
        if agent_id in first_line:
            raise InvalidRequestsFile(
                f"{name}:{line.line}: agent {line.agent_name or agent_id} already has a request on line"
                f" {first_line[agent_id]} (an agent may appear once per run)"
            )
        first_line[agent_id] = line.line
        requests.append(line.with_agent(agent_id))
    return requests


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "a number" if isinstance(value, int | float) and not isinstance(value, bool) else "true/false"
