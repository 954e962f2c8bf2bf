"""Tool-call ids on the wire: the stored id when the provider accepts it, else a stable stand-in.

Stored tool-call ids come from whichever provider answered (``toolu_...`` from Anthropic,
``call_...`` from OpenAI) or from nightshift (the greeting's call). An agent whose model changes
provider replays them to a provider that did not make them, and each provider refuses some ids:
OpenAI ids over 40 characters, Anthropic ids outside ``^[a-zA-Z0-9_-]+$``. Agents created before
the greeting's id was shortened hold 41-character ids, so the translation, not a data migration,
makes every id acceptable.

A refused id is replaced by ``call_`` and 32 hex digits of its SHA-256 (37 characters, acceptable to
both). The mapping is a pure function of the stored id, so the assistant's call and the tool
result that answers it get the same wire id, in every request, without remembering anything.
Pure functions.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

OPENAI_MAX_LENGTH: Final = 40
ANTHROPIC_PATTERN: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
_STAND_IN_PREFIX: Final = "call_"
_STAND_IN_DIGITS: Final = 32


def openai_tool_call_id(stored: str) -> str:
    """The id to send OpenAI for a stored tool-call id (at most 40 characters, never empty)."""
    if 0 < len(stored) <= OPENAI_MAX_LENGTH:
        return stored
    return _stand_in(stored)


def anthropic_tool_use_id(stored: str) -> str:
    """The id to send Anthropic for a stored tool-call id (matching ``^[a-zA-Z0-9_-]+$``)."""
    if ANTHROPIC_PATTERN.fullmatch(stored):
        return stored
    return _stand_in(stored)


def _stand_in(stored: str) -> str:
    digest = hashlib.sha256(stored.encode()).hexdigest()
    return f"{_STAND_IN_PREFIX}{digest[:_STAND_IN_DIGITS]}"
