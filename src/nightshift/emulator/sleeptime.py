"""The scripted model as a sleep-time agent: it keeps what the user stated, then finishes its edits.

A sleep-time agent's request is told by its tools (it has ``memory_finish_edits``) and by its
last user message: a transcript of another agent's conversation, framed by a
``<system-reminder>`` and listed after ``Messages:`` as ``role: text`` lines (the frame nightshift
and Letta give it). The model then:

1. when no tool has run since the transcript, and its ``user:`` lines state something about the
   user ("my name is ...", "I live in ...", "I like ...", "I work at ...", "my favourite ... is
   ...", "remember ..."), inserts those lines, one per line, into the ``human`` block (or the first
   block that is not a persona) with one ``memory_insert`` call;
2. otherwise (a tool ran, or nothing was stated, or it has no ``memory_insert``) it calls
   ``memory_finish_edits``.

So a sleep-time run of the emulator takes two steps when its transcript states a fact and one
when it does not: predictable for tests, the demo and the benchmark.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

FINISH = "memory_finish_edits"
INSERT = "memory_insert"
_FRAME = "<system-reminder>"
_LISTED = "Messages:\n"
_USER_LINE = re.compile(r"^user: (.+)$", re.M)
_STATED = re.compile(
    r"\b(?:my name is|i am called|i live|i like|i love|i prefer|i work|i'm from|i am from"
    r"|my favou?rite|remember)\b",
    re.I,
)
_BLOCK_LABEL = re.compile(r"^<([^/<>\s]+)>\n(?:<description>.*?</description>\n)?<metadata>", re.M)
_PERSONAS = frozenset({"persona", "memory_persona"})


def is_sleeptime_request(tool_names: Sequence[str], user_text: str) -> bool:
    """Whether the request is a sleep-time agent's: its memory tools and a framed transcript."""
    return FINISH in tool_names and user_text.lstrip().startswith(_FRAME) and _LISTED in user_text


def stated_facts(transcript: str) -> list[str]:
    """The user's lines of a transcript that state something about the user, in order, once each."""
    listed = transcript.split(_LISTED, 1)[-1]
    lines = (line.strip() for line in _USER_LINE.findall(listed))
    return list(dict.fromkeys(line for line in lines if _STATED.search(line)))


def target_label(system: str) -> str | None:
    """The block to keep the user's facts in: ``human``, else the first block that is no persona."""
    labels = _BLOCK_LABEL.findall(system)
    if "human" in labels:
        return "human"
    return next((label for label in labels if label not in _PERSONAS), None)


def sleeptime_call(
    tool_names: Sequence[str], user_text: str, tools_ran: bool, system: str
) -> tuple[str, dict[str, Any]]:
    """The call a sleep-time agent makes next (its tool's name and arguments), by the rules above."""
    if not tools_ran and INSERT in tool_names:
        facts = stated_facts(user_text)
        label = target_label(system)
        if facts and label is not None:
            return INSERT, {"label": label, "new_str": "\n".join(facts)}
    return FINISH, {}
