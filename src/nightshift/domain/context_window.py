"""Keeping an agent's in-context window inside its context window: when to warn, what to evict.

Pure: the callers (``runtime.context``) count the tokens and write what is decided here.

Of an agent's ``context_window``, ``answer_room`` is kept for the answer (its ``max_tokens``, at
most a quarter of the window); the rest is the prompt's (``prompt_room``). Past ``PRESSURE`` of it
the agent gets a memory-pressure notice, once on the way up, so it can save what matters to core
or archival memory. A request that would go past ``TRIGGER`` of it is not sent: the oldest part of
the conversation leaves the window first and a summary of it takes its place, the window then
holding at most ``TARGET`` (the margin up to the full room absorbs the error of the estimates).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from nightshift.domain.agents import LLMConfig
from nightshift.domain.messages import Message, MessageKind, Role

PRESSURE: Final = 0.75
TRIGGER: Final = 0.9
TARGET: Final = 0.5
# What a summary may take, as a share of the prompt's room, and its bounds in tokens.
SUMMARY_SHARE: Final = 0.1
MIN_SUMMARY_TOKENS: Final = 128
MAX_SUMMARY_TOKENS: Final = 2_000


def answer_room(config: LLMConfig) -> int:
    """The tokens kept free for the model's answer."""
    return min(config.max_tokens, config.context_window // 4)


def prompt_room(config: LLMConfig) -> int:
    """The tokens a request's prompt may take."""
    return config.context_window - answer_room(config)


def summary_tokens(config: LLMConfig) -> int:
    """The most tokens a summary of evicted messages may take (its request's ``max_tokens``)."""
    return max(MIN_SUMMARY_TOKENS, min(MAX_SUMMARY_TOKENS, int(prompt_room(config) * SUMMARY_SHARE)))


class Pressure(StrEnum):
    """What the size of an agent's next request calls for."""

    NONE = "none"
    NOTICE = "notice"  # it just went past PRESSURE: tell the agent
    SUMMARIZE = "summarize"  # past TRIGGER: evict and summarize before the request


def pressure(config: LLMConfig, tokens: int, *, before: int | None) -> Pressure:
    """What a request of ``tokens`` calls for, the agent's last one having been ``before`` (None: unknown)."""
    room = prompt_room(config)
    if tokens > TRIGGER * room:
        return Pressure.SUMMARIZE
    if before is not None and before <= PRESSURE * room < tokens:
        return Pressure.NOTICE
    return Pressure.NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryPlan:
    """A summary an agent's step waits for: the messages it replaces (the oldest of the window,
    after the system message), their estimated tokens, and the model that writes it."""

    evicted: tuple[str, ...]
    evicted_tokens: int
    model: str  # provider/model
    max_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {
            "evicted": list(self.evicted),
            "evicted_tokens": self.evicted_tokens,
            "model": self.model,
            "max_tokens": self.max_tokens,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SummaryPlan:
        return cls(
            evicted=tuple(data["evicted"]),
            evicted_tokens=int(data["evicted_tokens"]),
            model=str(data["model"]),
            max_tokens=int(data["max_tokens"]),
        )


def choose_eviction(window: Sequence[tuple[Role, int]], *, total: int, config: LLMConfig) -> int | None:
    """How many of the oldest messages to evict, or None when evicting cannot make room.

    Args:
        window: The in-context messages after the system message, oldest first: role and tokens.
        total: The tokens of the whole request (system message and tools included).
        config: The agent's model limits.

    The kept part never starts with a tool result (a call and its results leave together), and
    keeps the model's last turn with its results and what came after (the work in hand). The
    fewest messages are evicted that bring the request, summary included, to ``TARGET``; if none
    do, the most that may be. An eviction that frees no more than the summary takes is no eviction.
    """
    fixed = max(0, total - sum(tokens for _, tokens in window))
    summary = summary_tokens(config)
    goal = TARGET * prompt_room(config)
    kept = total - fixed
    best: int | None = None
    freed = 0
    last_turn = max((i for i, (role, _) in enumerate(window) if role is Role.ASSISTANT), default=len(window) - 1)
    for cut in range(1, min(last_turn, len(window) - 1) + 1):
        freed += window[cut - 1][1]
        kept -= window[cut - 1][1]
        if window[cut][0] is Role.TOOL or freed <= summary:
            continue
        best = cut
        if fixed + summary + kept <= goal:
            break
    return best


def summary_notice(summary: str, *, evicted: int, now: datetime) -> str:
    """The text of the message that stands for evicted messages: how many, where they are, the summary."""
    return json.dumps(
        {
            "type": "system_alert",
            "message": (
                f"Note: {evicted} earlier messages left your context window to make room; they are kept in "
                "recall memory, where conversation_search finds them. A summary of the conversation "
                f"so far:\n{summary}"
            ),
            "time": now.isoformat(),
        }
    )


def pressure_notice(now: datetime) -> str:
    """The text of the memory-pressure notice."""
    return json.dumps(
        {
            "type": "system_alert",
            "message": (
                "Warning: your context window is filling up. Older messages will soon leave it and be "
                "replaced by a summary. Save what you need to keep to core memory or archival memory now."
            ),
            "time": now.isoformat(),
        }
    )


def is_summary(message: Message) -> bool:
    """Whether ``message`` stands for evicted messages (see ``summary_notice``)."""
    return message.kind is MessageKind.SUMMARY
