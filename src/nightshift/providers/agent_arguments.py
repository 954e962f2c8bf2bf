"""The two arguments nightshift adds to every tool: ``inner_thoughts`` and ``request_heartbeat``.

The model writes its reasoning as the ``inner_thoughts`` argument of the tool it calls and asks to
be called again with ``request_heartbeat``. This module adds them to tool schemas, strips them
from the model's tool calls, and puts the reasoning back into past calls shown to the model.
Shared by every provider's wire translation; pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

INNER_THOUGHTS: Final = "inner_thoughts"
REQUEST_HEARTBEAT: Final = "request_heartbeat"
AGENT_ARGUMENTS: Final = frozenset({INNER_THOUGHTS, REQUEST_HEARTBEAT})

INNER_THOUGHTS_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "string",
    "description": "Deep inner monologue private to you only: your reasoning before this call.",
}
REQUEST_HEARTBEAT_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "boolean",
    "description": (
        "Request an immediate heartbeat after the function runs. Set to true if you want to be "
        "called again to continue (e.g. to act on the result), false to end your turn."
    ),
}


def with_agent_arguments(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of a tool's parameter schema with the agent arguments added.

    ``inner_thoughts`` becomes the first property and ``request_heartbeat`` the last; both are
    required. Properties of the same names already in the schema are replaced.

    Args:
        parameters: The tool's JSON schema for its arguments (an object schema), or None.

    Returns:
        The new schema; the input is not changed.
    """
    source = dict(parameters or {})
    properties = source.get("properties") or {}
    required = [r for r in source.get("required") or [] if r not in AGENT_ARGUMENTS]
    return {
        **source,
        "type": "object",
        "properties": {
            INNER_THOUGHTS: dict(INNER_THOUGHTS_SCHEMA),
            **{k: v for k, v in properties.items() if k not in AGENT_ARGUMENTS},
            REQUEST_HEARTBEAT: dict(REQUEST_HEARTBEAT_SCHEMA),
        },
        "required": [INNER_THOUGHTS, *required, REQUEST_HEARTBEAT],
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitArguments:
    """A tool call's arguments with the agent arguments taken out.

    ``arguments`` is JSON text of the remaining object, or the model's text verbatim when it was
    not a JSON object (with no reasoning and no heartbeat then).
    """

    arguments: str
    inner_thoughts: str | None = None
    request_heartbeat: bool = False


def split_agent_arguments(value: Mapping[str, Any] | str) -> SplitArguments:
    """Take ``inner_thoughts`` and ``request_heartbeat`` out of a tool call's arguments.

    Never raises: arguments that are not a JSON object are kept as the raw text.

    Args:
        value: The arguments as the provider gave them: a dict (Anthropic) or JSON text (OpenAI).

    Returns:
        The cleaned arguments, the reasoning and the heartbeat flag.
    """
    parsed: Any
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else {}
        except ValueError:
            return SplitArguments(arguments=value)
        if not isinstance(parsed, dict):
            return SplitArguments(arguments=value)
    else:
        parsed = dict(value)
    thoughts = parsed.pop(INNER_THOUGHTS, None)
    heartbeat = parsed.pop(REQUEST_HEARTBEAT, False)
    return SplitArguments(
        arguments=json.dumps(parsed, ensure_ascii=False),
        inner_thoughts=_as_text(thoughts),
        request_heartbeat=_as_bool(heartbeat),
    )


def joined_reasoning(calls: Sequence[SplitArguments]) -> str | None:
    """The inner thoughts of a turn's calls as one text: each different one once, in order."""
    thoughts = dict.fromkeys(c.inner_thoughts for c in calls if c.inner_thoughts)
    return "\n".join(thoughts) or None


def with_reasoning(arguments: str, reasoning: str | None) -> dict[str, Any] | None:
    """Past call arguments as the model wrote them: ``inner_thoughts`` first, then the rest.

    Args:
        arguments: The stored JSON text of the arguments (without the agent arguments).
        reasoning: The assistant message's reasoning, if any.

    Returns:
        The arguments object, or None when ``arguments`` is not a JSON object.
    """
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    rest = {k: v for k, v in parsed.items() if k != INNER_THOUGHTS}
    return {INNER_THOUGHTS: reasoning, **rest} if reasoning else rest


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _as_bool(value: Any) -> bool:
    # Models sometimes write the flag as a string; "true" means what it says.
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return value is True
