"""Read and check a requests file (JSON Lines) before a batch run is submitted.

One request per line, in the API's shape: ``{"agent_id": ..., "messages": [{"role", "content"}]}``
or ``{"agent_id": ..., "input": "..."}``, with an optional ``max_steps``. ``agent_name`` may stand
in for ``agent_id``; it is resolved later, through the server. Blank lines are skipped. Every
problem is one line naming the file and the line: ``requests.jsonl:7: not JSON (...)``.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from nightshift.api.batch_schemas import BatchRequestBody
from nightshift.cli_commands.client import CommandFailed, dotted

REQUEST_KEYS = ("agent_id", "agent_name", "messages", "input", "max_steps")


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


def parse_requests(name: str, text: str) -> list[RequestLine]:
    """Parse and check every line of ``text`` (the contents of the file called ``name``).

    Raises:
        CommandFailed: at the first bad line, saying which line and what is wrong.
    """
    found: list[RequestLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        found.append(_parse_line(f"{name}:{number}", number, raw))
    if not found:
        raise CommandFailed(f"{name}: no requests (expected one JSON object per line)")
    return found


def _parse_line(where: str, number: int, raw: str) -> RequestLine:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise CommandFailed(f"{where}: not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(value, dict):
        raise CommandFailed(f"{where}: expected a JSON object with 'agent_id' and 'messages', got {_kind(value)}")
    for key in value:
        if key not in REQUEST_KEYS:
            close = difflib.get_close_matches(key, REQUEST_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CommandFailed(f"{where}: {key!r} is not a field of a request{hint}")
    agent_id, agent_name = value.get("agent_id"), value.get("agent_name")
    if agent_id is None and agent_name is None:
        raise CommandFailed(f"{where}: 'agent_id' is required (or 'agent_name')")
    if agent_id is not None and agent_name is not None:
        raise CommandFailed(f"{where}: give 'agent_id' or 'agent_name', not both")
    if agent_name is not None and (not isinstance(agent_name, str) or not agent_name):
        raise CommandFailed(f"{where}: 'agent_name': should be a name (a non-empty string)")
    body = {k: v for k, v in value.items() if k not in ("agent_id", "agent_name") and v is not None}
    try:
        # The API's own shape of a request; a name stands in for the agent id until it is resolved.
        request = BatchRequestBody.model_validate({"agent_id": agent_id if agent_name is None else "-", **body})
    except ValidationError as error:
        first = error.errors()[0]
        field = dotted(first["loc"])
        message = first["msg"]
        raise CommandFailed(f"{where}: '{field}': {message[:1].lower()}{message[1:]}") from None
    if not request.messages and request.input is None:
        raise CommandFailed(f"{where}: 'messages' or 'input' is required")
    return RequestLine(line=number, agent_id=agent_id, agent_name=agent_name, body=body)


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "a number" if isinstance(value, int | float) and not isinstance(value, bool) else "true/false"
