"""What the emulator's scripted model reads in a message's text: whether it is the user speaking
(not a heartbeat or a system alert), the message inside Letta's JSON wrapping, the facts a
"remember ..." message gives, the things it lists, where it names a tool, a memory block's value
in the system prompt; and the snippets its answers quote.
"""

from __future__ import annotations

import json
import re
from typing import Any

# How a message asks to remember something ("please remember that ...", "note: ...").
REMEMBER = re.compile(
    r"\b(?:please\s+)?(?:remember|memori[sz]e|don'?t forget|keep in mind|note)\b(?:\s+that)?[:,]?\s*", re.I
)
SNIPPET = 160  # the longest quote of a message or a result in an answer
_NAME = r"(?:[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*|\d+)"
_LIST = re.compile(rf"\b({_NAME}(?:\s*,\s*{_NAME})*)\s*,?\s+and\s+({_NAME})\b")


def listed_items(text: str) -> list[str]:
    """The things a message lists ("Paris, Rome and Oslo"), or none."""
    match = _LIST.search(text)
    if match is None:
        return []
    return [*(p.strip() for p in match.group(1).split(",")), match.group(2)]


def about_item(text: str, item: str) -> str:
    """The message as if it named only ``item`` of its list."""
    match = _LIST.search(text)
    assert match is not None
    return text[: match.start()] + item + text[match.end() :]


def stated_facts(text: str) -> list[str]:
    """The facts a "remember ..." message gives, split at semicolons and line breaks."""
    match = REMEMBER.search(text)
    if match is None:
        return []
    parts = re.split(r"[;\n]+", text[match.end() :])
    return [f for p in parts if (f := p.strip().rstrip(".!?").strip())]


def is_heartbeat(text: str) -> bool:
    """Whether a user message is automatic rather than something the user said: a heartbeat
    (Letta's JSON ``{"type": "heartbeat"}`` or a notice mentioning ``request_heartbeat``) or a
    system alert (``{"type": "system_alert"}``: a memory-pressure notice, a summary)."""
    parsed = _json_object(text)
    if parsed is not None:
        return parsed.get("type") in ("heartbeat", "system_alert")
    return "request_heartbeat" in text


def unwrap(text: str) -> str:
    """The message inside Letta-style JSON (``{"type": "user_message", "message": ...}``), or the text."""
    parsed = _json_object(text)
    if parsed is not None and isinstance(parsed.get("message"), str):
        return str(parsed["message"])
    return text


def _json_object(text: str) -> dict[str, Any] | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def mention_at(text: str, name: str) -> int:
    """Where lowercase ``text`` names ``name`` (as it is, or with spaces for underscores) as a
    whole word; -1 when it does not."""
    for candidate in (name, name.replace("_", " ")):
        match = re.search(rf"(?<![a-z0-9_]){re.escape(candidate)}(?![a-z0-9_])", text)
        if match is not None:
            return match.start()
    return -1


def fact_and_label(text: str) -> tuple[str, str]:
    """What a "remember ..." message asks to keep (the whole text when it does not say), and the
    block it belongs in: persona when it is about the agent, else human."""
    match = REMEMBER.search(text)
    fact = text[match.end() :] if match is not None else text
    fact = fact.strip().rstrip(".!?").strip() or text.strip()
    label = "persona" if re.search(r"\b(persona|yourself|your name)\b", text, re.I) else "human"
    return fact[: SNIPPET * 2], label


def block_value(system: str, label: str) -> str:
    """The value of a memory block compiled into the system prompt as ``<label ...>value</label>``."""
    match = re.search(rf"<{re.escape(label)}(?:\s[^>]*)?>\s*(.*?)\s*</{re.escape(label)}>", system, re.S)
    if match is None:
        return ""
    # nightshift compiles a block as <label><description/><metadata/><value>...</value></label>.
    value = re.search(r"<value>\s*(.*?)\s*</value>", match.group(1), re.S)
    return value.group(1) if value is not None else match.group(1)


def unwrap_result(text: str) -> str:
    """A tool result's message inside Letta-style JSON (``{"status", "message"}``), or the text."""
    parsed = _json_object(text)
    if parsed is not None and "message" in parsed:
        message = parsed["message"]
        return message if isinstance(message, str) else json.dumps(message)
    return text


def snip(text: str) -> str:
    """``text`` on one line, cut to ``SNIPPET`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET else flat[: SNIPPET - 3] + "..."
