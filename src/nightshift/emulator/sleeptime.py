"""The scripted model's sleep-time rule: how it keeps a main agent's memory from a transcript.

A sleep-time agent's request is told apart by its tools (it has ``memory_finish_edits``) and by
its last real user message, the transcript nightshift's sleep-time runs give it: a
``<system-reminder>`` frame, then ``Messages:`` and one ``role: text`` line per message. The
frame is recognised by its text alone: the emulator stands apart from the server it emulates a
provider for, and a real model reads the same words.

The rule gives a predictable two-step run: while no memory tool has run since the transcript, one
``memory_insert`` into the ``human`` block (or, without one, the first block that is not the
agent's own ``persona`` or ``memory_persona``) with every fact the user stated, one line each;
after it, or at once when there is nothing new to keep, ``memory_finish_edits``.

A fact is a sentence of a ``user:`` line that says something about the user ("my name is Ada",
"I live in Lyon", "I love jazz", "my favourite tea is sencha", "I work as a nurse", "remember
that ..."). It is written in the third person, the user's words otherwise kept: "The user's name
is Ada", "The user lives in Lyon". A fact the block already holds is not written again.

Pure: strings in, a ``MemoryEdit`` out; ``model.py`` turns it into a tool call.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

FINISH: Final = "memory_finish_edits"
INSERT: Final = "memory_insert"
# Any of these having run since the transcript means the memory was worked on: time to finish.
MEMORY_TOOLS: Final = frozenset(
    {INSERT, "memory_replace", "memory_rethink", FINISH, "memory", "core_memory_append", "core_memory_replace"}
)
# The agent's own blocks, which the user's facts do not go to.
OWN_BLOCKS: Final = frozenset({"persona", "memory_persona"})

_FRAME_START = "<system-reminder>"
_MESSAGES = "Messages:\n"
_USER_LINE = re.compile(r"^user: (.*)$", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_REMEMBER = re.compile(r"^(?:please\s+)?(?:remember|note|don'?t forget|keep in mind)(?:\s+that)?[:,]?\s+", re.I)
# Sentences that say something about the user; a sentence matching none is chat, not a fact.
_STATEMENTS: Final = (
    re.compile(r"\bmy (?:[\w'-]+ ){0,3}(?:is|are|was)\b", re.I),
    re.compile(r"\b(?:call me|i(?:'m| am) called)\b", re.I),
    re.compile(r"\bi (?:really |also |still )?(?:live|work|study|grew up|come from)\b", re.I),
    re.compile(r"\bi(?:'m| am) (?:from|based in|allergic to|a|an)\b", re.I),
    re.compile(r"\bi (?:really |also |still )?(?:like|love|prefer|enjoy|hate|dislike|have|own|speak)\b", re.I),
)
_SUBJECT = re.compile(r"^(?:i(?:'m| am)|i)\b\s*", re.I)
_SUBJECT_VERB = re.compile(r"^i (?:(really|also|still) )?([a-z]+)\b", re.I)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEdit:
    """The sleep-time agent's next call: the tool, the arguments it needs, and why."""

    tool_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    thoughts: str


def is_transcript(text: str) -> bool:
    """Whether a user message is a sleep-time transcript (the frame, then ``Messages:``)."""
    return text.lstrip().startswith(_FRAME_START) and _MESSAGES in text


def is_sleeptime_request(tool_names: Collection[str], user_text: str) -> bool:
    """Whether a request is a sleep-time agent's: it can finish its edits and reads a transcript."""
    return FINISH in tool_names and is_transcript(user_text)


def next_edit(*, system: str, transcript: str, ran: Sequence[str | None], tool_names: Collection[str]) -> MemoryEdit:
    """The sleep-time agent's next call, given the tools that ran since the transcript (``ran``)."""
    finish = MemoryEdit(tool_name=FINISH, thoughts="The memory is up to date; finishing my edits.")
    if any(name in MEMORY_TOOLS for name in ran) or INSERT not in tool_names:
        return finish
    label = _target_label(system)
    if label is None:
        return finish
    known = block_value(system, label).lower()
    facts = [f for f in user_facts(transcript) if f.lower() not in known]
    if not facts:
        return MemoryEdit(tool_name=FINISH, thoughts="The user stated nothing new to keep; finishing my edits.")
    return MemoryEdit(
        tool_name=INSERT,
        arguments={"label": label, "new_str": "\n".join(facts), "insert_line": -1},
        thoughts=f"The user stated {len(facts)} new fact(s); adding them to the {label} block.",
    )


def user_facts(transcript: str) -> list[str]:
    """The facts the user stated in a transcript, in order, each once, in the third person."""
    messages = transcript.split(_MESSAGES, 1)[-1]
    facts: list[str] = []
    for line in _USER_LINE.findall(messages):
        for sentence in _SENTENCE_END.split(line):
            fact = _as_fact(sentence)
            if fact and fact not in facts:
                facts.append(fact)
    return facts


def _as_fact(sentence: str) -> str | None:
    text = sentence.strip().rstrip(".!?;").strip()
    remembered = _REMEMBER.match(text)
    if remembered is not None:
        text = text[remembered.end() :].strip()
    elif not _states(text):
        return None
    else:
        # A greeting before the statement ("Hello, my name is Basil") is not part of the fact.
        while "," in text and not _states(text.split(",", 1)[0]) and _states(rest := text.split(",", 1)[1]):
            text = rest.strip()
    if not text:
        return None
    return _third_person(text)


def _states(text: str) -> bool:
    """Whether a piece of a sentence says something about the user."""
    return any(p.search(text) for p in _STATEMENTS)


def _third_person(text: str) -> str:
    """The user's sentence about themselves as a note about the user: "I live in Lyon" -> "The
    user lives in Lyon", "My name is Ada" -> "The user's name is Ada"."""
    lowered = text.lower()
    if lowered.startswith("my "):
        rest = _pronouns(text[3:])
        return f"The user's {rest}"
    if lowered.startswith("call me "):
        return f"The user goes by {_pronouns(text[8:])}"
    if lowered.startswith(("i'm ", "i am ")):
        return f"The user is {_pronouns(_SUBJECT.sub('', text, count=1))}"
    verb = _SUBJECT_VERB.match(text)
    if verb is not None:
        adverb, word = verb.group(1), verb.group(2)
        head = f"{adverb} {_conjugate(word)}" if adverb else _conjugate(word)
        return f"The user {head}{_pronouns(text[verb.end() :])}"
    words = _pronouns(text)
    return words[:1].upper() + words[1:]


def _conjugate(verb: str) -> str:
    """The verb after "The user": "live" -> "lives", "have" -> "has"."""
    lowered = verb.lower()
    if lowered == "have":
        return "has"
    if lowered.endswith(("s", "sh", "ch", "x", "o")):
        return verb + "es"
    if lowered.endswith("y") and lowered[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return verb[:-1] + "ies"
    return verb + "s"


_PRONOUNS: Final = (
    (re.compile(r"\bI(?:'m| am)\b"), "they are"),
    (re.compile(r"\bI've\b"), "they have"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bmyself\b", re.I), "themselves"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bme\b", re.I), "them"),
)


def _pronouns(text: str) -> str:
    for pattern, replacement in _PRONOUNS:
        text = pattern.sub(replacement, text)
    return text


_MEMORY_BLOCKS = re.compile(r"<memory_blocks>(.*?)</memory_blocks>", re.S)
# A block opens on a line of its own, followed by its description or its metadata.
_BLOCK_OPEN = re.compile(r"^<([A-Za-z_][\w.-]*)>\s*\n\s*<(?:description|metadata)\b", re.M)


def block_labels(system: str) -> list[str]:
    """The labels of the memory blocks compiled into a system prompt, in order."""
    section = _MEMORY_BLOCKS.search(system)
    return _BLOCK_OPEN.findall(section.group(1)) if section is not None else []


def block_value(system: str, label: str) -> str:
    """The value of the ``label`` block in a system prompt (empty when there is none)."""
    match = re.search(rf"^<{re.escape(label)}>\s*\n(.*?)^</{re.escape(label)}>", system, re.S | re.M)
    if match is None:
        return ""
    value = re.search(r"<value>\s*(.*?)\s*</value>", match.group(1), re.S)
    return value.group(1) if value is not None else match.group(1)


def _target_label(system: str) -> str | None:
    """``human`` if there is such a block (or no block shows at all), else the first that is not
    the agent's own; None when every block is its own."""
    labels = block_labels(system)
    if not labels or "human" in labels:
        return "human"
    return next((label for label in labels if label not in OWN_BLOCKS), None)
