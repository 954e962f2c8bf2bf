"""The scripted model behind the emulator: a deterministic answer that fits the tools it is given.

Pure: no I/O, no state; the same input gives the same answer. Rules, in order:

1. a forced tool (``tool_choice`` naming one) is called;
2. a sleep-time agent's request (it has ``memory_finish_edits`` and its last real user message is
   a sleep-time transcript) gets one ``memory_insert`` of the facts the user stated in the
   transcript, then ``memory_finish_edits`` (at once when there is nothing new to keep): the rule
   lives in ``emulator/sleeptime.py``;
3. after a tool ran (a tool result follows the last real user message, heartbeats aside) it calls
   ``send_message`` with a summary of the result, ``request_heartbeat`` false -- unless the user
   asked to remember something, a memory writer is there and none has run yet: then it saves the
   last result with it first (``request_heartbeat`` true);
4. when the last user message names a custom tool (not send_message nor a memory tool) it calls
   that tool with arguments drawn from the message, ``request_heartbeat`` true; when the message
   lists several things for it ("in Paris, Rome and Oslo") it calls it once per thing: all in one
   turn when the request allows parallel calls, else one per turn, then summarises every result;
5. when the message asks to remember something and ``core_memory_append`` or ``rethink_memory`` is
   there (for a letta_v1 request, ``memory_insert`` too), it calls that, ``request_heartbeat``
   true; several facts ("remember: A; B; C") are appended one per call: with parallel calls all
   in one turn together with ``send_message``, else one per turn and then ``send_message``;
6. otherwise it calls ``send_message`` with a reply, ``request_heartbeat`` false.

A tool the client runs itself (Letta's ``client_tools``) is a custom tool to this model, and so
is one that needs approval: a message that names it gets it called (rule 4), and the call waits
for the client's answer on the server's side; the answer's results then count as results (rule 3).

In rule 3, a result that asks for another call ("... call read_page with page=8") gets it, with
``request_heartbeat`` true, as a model follows a paging tool. A turn's results are summarised
together (rule 3 looks at every result of the last turn). Heartbeats and system alerts (notices,
summaries of evicted messages) are not the user speaking.

Without tools (or with tool choice "none") it answers with text: a reply, or, when the system
prompt asks for a summary, a summary of the transcript it is given. ``inner_thoughts`` is always
filled: as an argument when the tool's schema has it, as a text block otherwise.

A letta_v1 request (no tool has ``request_heartbeat``; tool choice as sent, usually ``auto``) is
answered by the same rules, except that a call comes without text (such a model speaks only in its
final answer) and where rule 3 or 6 would call ``send_message`` and the agent has none, it answers
in text: the summary of the results, or the reply.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from nightshift.emulator import sleeptime
from nightshift.emulator.arguments import SKIPPED, TEXT_FIELDS, generate_arguments
from nightshift.emulator.texts import (
    REMEMBER,
    about_item,
    block_value,
    fact_and_label,
    is_heartbeat,
    listed_items,
    mention_at,
    snip,
    stated_facts,
    unwrap,
    unwrap_result,
)

SEND_MESSAGE: Final = "send_message"
MEMORY_WRITERS: Final = ("core_memory_append", "rethink_memory")
# A letta_v1 agent's memory writer (Letta gives it memory_insert and memory_replace).
V1_MEMORY_WRITERS: Final = (*MEMORY_WRITERS, "memory_insert")
NON_CUSTOM: Final = frozenset(
    {
        SEND_MESSAGE,
        "core_memory_append",
        "core_memory_replace",
        "rethink_memory",
        "archival_memory_insert",
        "archival_memory_search",
        "conversation_search",
    }
)
_MEMORY = re.compile(r"\bmemory\b", re.I)
_NEXT_CALL = re.compile(r"\bcall (\w+) with ((?:\w+=[^\s,;.]+(?:,\s*|\s+and\s+)?)+)", re.I)
_SUMMARIZE = re.compile(r"\bsummar(?:y|ies|i[sz]e)\b", re.I)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool the model may call: its name, description and parameter schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One message the model reads: ``user``, ``assistant`` (with the tool it called) or ``tool``."""

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_name: str | None = None
    is_error: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolChoice:
    """``auto`` (may call), ``any`` (must call one), ``tool`` (must call ``name``) or ``none``."""

    mode: Literal["auto", "any", "tool", "none"] = "auto"
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInput:
    """What the model sees, taken out of either provider's request.

    ``parallel``: whether the request lets the model call several tools in one turn.
    """

    system: str = ""
    turns: tuple[Turn, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCall:
    """One tool call of an answer: the tool's name and its full arguments."""

    tool_name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelOutput:
    """The answer: tool calls, in order, and/or text."""

    calls: tuple[ModelCall, ...] = ()
    text: str | None = None

    @property
    def tool_name(self) -> str | None:
        """The first call's tool, if any."""
        return self.calls[0].tool_name if self.calls else None

    @property
    def arguments(self) -> dict[str, Any]:
        """The first call's arguments (empty without a call)."""
        return self.calls[0].arguments if self.calls else {}


def call_id_suffix(seed: str, index: int) -> str:
    """24 hex digits for the id of an answer's ``index``-th call (the first's as it always was)."""
    return seed[:24] if index == 0 else hashlib.sha256(f"{seed}/{index}".encode()).hexdigest()[:24]


def respond(model_input: ModelInput) -> ModelOutput:
    """Answer as the rules of this module's docstring say."""
    output = _respond(model_input)
    if output.calls and not _heartbeats(model_input):
        return replace(output, text=None)
    return output


def _heartbeats(model_input: ModelInput) -> bool:
    """Whether the request is a memgpt one: its tools carry ``request_heartbeat``."""
    return any("request_heartbeat" in (t.parameters.get("properties") or {}) for t in model_input.tools)


def _respond(model_input: ModelInput) -> ModelOutput:
    tools = {t.name: t for t in model_input.tools}
    choice = model_input.tool_choice
    if choice.mode == "none" or not tools:
        if _SUMMARIZE.search(model_input.system):
            return ModelOutput(text=_summary_text(model_input))
        return ModelOutput(text=_reply_text(model_input))
    user_text, after = _last_user(model_input.turns)
    results = [t for t in after if t.role == "tool"]
    if choice.mode == "tool" and choice.name in tools:
        forced = tools[choice.name]
        plan = _plan({forced.name: forced}, user_text, results, model_input)
        if plan is not None:
            return plan
        thoughts = f"I was asked to call {forced.name}; filling it in from the conversation."
        return _call(forced, _arguments(forced, user_text), thoughts, heartbeat=True)
    if sleeptime.is_sleeptime_request(tools, user_text):
        edit = sleeptime.next_edit(
            system=model_input.system, transcript=user_text, ran=[r.tool_name for r in results], tool_names=tools
        )
        tool = tools[edit.tool_name]
        return _call(
            tool, _arguments(tool, "", edit.arguments), edit.thoughts, heartbeat=edit.tool_name != sleeptime.FINISH
        )
    plan = _plan(tools, user_text, results, model_input)
    if plan is not None:
        return plan
    if choice.mode == "any":
        # The rules found nothing to call but a call is required: the first tool will do.
        tool = next(iter(tools.values()))
        thoughts = f"A tool call is required; {tool.name} is the closest fit."
        return _call(tool, _arguments(tool, user_text), thoughts, heartbeat=False)
    return ModelOutput(text=_reply_text(model_input))


def _plan(
    tools: Mapping[str, ToolSpec], user_text: str, results: list[Turn], model_input: ModelInput
) -> ModelOutput | None:
    send = tools.get(SEND_MESSAGE)
    writers = MEMORY_WRITERS if _heartbeats(model_input) else V1_MEMORY_WRITERS
    writer = next((tools[n] for n in writers if n in tools), None)
    custom = _named_tool(tools, user_text)
    several = _several(custom, user_text, results, model_input.parallel)
    if several is not None:
        return several
    facts = stated_facts(user_text) if writer is not None and writer.name == "core_memory_append" else []
    if results and 1 < len(facts) and not model_input.parallel and custom is None:
        appended = sum(1 for r in results if r.tool_name == writer.name) if writer is not None else 0
        if 0 < appended < len(facts) and writer is not None:
            return _save_facts(writer, send, facts, user_text, model_input, saved=appended)
    if results:
        group = _last_group(model_input.turns)
        last = results[-1]
        follow = _next_call(tools, last)
        if follow is not None:
            return follow
        saved = any(r.tool_name in writers for r in results)
        if writer is not None and not saved and not last.is_error and REMEMBER.search(user_text):
            label = fact_and_label(user_text)[1]
            fact = snip(unwrap_result(last.text))
            thoughts = f"{last.tool_name or 'The tool'} finished; saving its result to my {label} memory."
            return _remember(writer, fact, label, model_input.system, thoughts, fact)
        if send is None and not _answers_in_text(model_input):
            return None
        items = listed_items(user_text) if custom is not None else []
        if len(items) > 1 and custom is not None:
            # Every result of the listed lookups, not only the last turn's.
            group = [r for r in results if r.tool_name == custom.name] or group
        message = "; ".join(_summary(r) for r in group or [last])
        if send is None:
            return ModelOutput(text=message)
        thoughts = f"{last.tool_name or 'The tool'} finished; telling the user what came of it."
        return _call(send, _arguments(send, message, {"message": message}), thoughts, heartbeat=False)
    if custom is not None:
        thoughts = f"The user asked for {custom.name}; calling it with the details from their message."
        return _call(custom, _arguments(custom, user_text), thoughts, heartbeat=True)
    if writer is not None and (REMEMBER.search(user_text) or _MEMORY.search(user_text)):
        if len(facts) > 1:
            return _save_facts(writer, send, facts, user_text, model_input, saved=0)
        fact, label = fact_and_label(user_text)
        thoughts = f"The user wants me to remember that {fact}; saving it to my {label} memory."
        return _remember(writer, fact, label, model_input.system, thoughts, user_text)
    if send is None:
        return None
    reply = _reply_text(model_input)
    thoughts = "The user wrote to me; answering directly."
    return _call(send, _arguments(send, reply, {"message": reply}), thoughts, heartbeat=False)


def _answers_in_text(model_input: ModelInput) -> bool:
    """Whether the model may end its turn in text: a letta_v1 request that does not force a call."""
    return model_input.tool_choice.mode == "auto" and not _heartbeats(model_input)


def _next_call(tools: Mapping[str, ToolSpec], result: Turn) -> ModelOutput | None:
    """The call a tool's result asks for ("call read_page with page=8"), if it names a tool there is."""
    if result.is_error:
        return None
    match = _NEXT_CALL.search(unwrap_result(result.text))
    if match is None or match.group(1) not in tools:
        return None
    tool = tools[match.group(1)]
    given: dict[str, Any] = {}
    properties: Mapping[str, Any] = tool.parameters.get("properties") or {}
    for name, value in re.findall(r"(\w+)=([^\s,;.]+)", match.group(2)):
        kind = (properties.get(name) or {}).get("type") if isinstance(properties.get(name), Mapping) else None
        given[name] = int(value) if kind == "integer" and value.lstrip("-").isdigit() else value
    thoughts = f"{result.tool_name or 'The tool'} says there is more; calling {tool.name} again."
    return _call(tool, _arguments(tool, "", given), thoughts, heartbeat=True)


def _summary_text(model_input: ModelInput) -> str:
    """A summary of the transcript a summarizing request gives: its first line and its last lines, cut short."""
    text = "\n".join(t.text for t in model_input.turns if t.role == "user")
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("[")]
    if not lines:
        return "Nothing of note happened."
    picked = lines[:1] + lines[-2:] if len(lines) > 3 else lines
    return f"Summary of {len(lines)} messages: " + " / ".join(snip(line) for line in picked)


def _several(custom: ToolSpec | None, user_text: str, results: list[Turn], parallel: bool) -> ModelOutput | None:
    """The next calls of the named custom tool over the things the message lists, if some are left."""
    if custom is None:
        return None
    items = listed_items(user_text)
    if len(items) < 2:
        return None
    done = sum(1 for r in results if r.tool_name == custom.name)
    if done >= len(items):
        return None
    todo = items[done:] if parallel else items[done : done + 1]
    thoughts = f"The user asked for {custom.name} on {', '.join(items)}; looking up {', '.join(todo)}."
    return _together(
        [
            _call(
                custom,
                _arguments(custom, about_item(user_text, item), _item_hint(custom, item)),
                thoughts,
                heartbeat=True,
            )
            for item in todo
        ]
    )


def _item_hint(tool: ToolSpec, item: str) -> dict[str, Any]:
    """The listed thing as the value of the tool's first plain string argument (``city``...)."""
    properties: Mapping[str, Any] = tool.parameters.get("properties") or {}
    for name, schema in properties.items():
        if name not in SKIPPED and name not in TEXT_FIELDS and isinstance(schema, Mapping):
            if schema.get("type") == "string" and "enum" not in schema:
                return {name: item}
    return {}


def _save_facts(
    writer: ToolSpec, send: ToolSpec | None, facts: list[str], user_text: str, model_input: ModelInput, *, saved: int
) -> ModelOutput:
    """Save several facts: all at once with the answer when parallel calls are allowed, else the next."""
    label = fact_and_label(user_text)[1]
    todo = facts if model_input.parallel else facts[saved : saved + 1]
    outputs = [
        _call(writer, _arguments(writer, fact, {"label": label, "content": fact}), f"Saving: {fact}.", heartbeat=True)
        for fact in todo
    ]
    if model_input.parallel and send is not None:
        reply = "Got it, I have saved that to my memory."
        outputs.append(_call(send, _arguments(send, reply, {"message": reply}), "Telling the user.", heartbeat=False))
    return _together(outputs)


def _together(outputs: list[ModelOutput]) -> ModelOutput:
    """Several one-call answers as one turn."""
    texts = dict.fromkeys(o.text for o in outputs if o.text)
    return ModelOutput(calls=tuple(c for o in outputs for c in o.calls), text="\n".join(texts) or None)


def _last_group(turns: tuple[Turn, ...]) -> list[Turn]:
    """The results of the model's last turn (heartbeats after them aside), in order."""
    group: list[Turn] = []
    for turn in reversed(turns):
        if turn.role == "tool":
            group.append(turn)
        elif turn.role == "user" and is_heartbeat(turn.text) and not group:
            continue
        else:
            break
    return group[::-1]


def _remember(writer: ToolSpec, fact: str, label: str, system: str, thoughts: str, text: str) -> ModelOutput:
    """Save ``fact`` to the ``label`` block with the memory writer there is (append or rethink)."""
    hints: dict[str, Any] = {
        "label": label,
        "target_block_label": label,
        "content": fact,
        "new_str": fact,
        "insert_line": -1,
    }
    hints["new_memory"] = "\n".join(p for p in (block_value(system, label), fact) if p)
    return _call(writer, _arguments(writer, text, hints), thoughts, heartbeat=True)


def _call(tool: ToolSpec, arguments: dict[str, Any], thoughts: str, *, heartbeat: bool) -> ModelOutput:
    properties = tool.parameters.get("properties") or {}
    full: dict[str, Any] = {}
    text = None
    if "inner_thoughts" in properties:
        full["inner_thoughts"] = thoughts
    else:
        text = thoughts
    full.update(arguments)
    if "request_heartbeat" in properties:
        full["request_heartbeat"] = heartbeat
    return ModelOutput(calls=(ModelCall(tool_name=tool.name, arguments=full),), text=text)


def _arguments(tool: ToolSpec, text: str, hints: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return generate_arguments(tool.parameters, text, exclude_words=[*tool.name.split("_"), tool.name], hints=hints)


def _last_user(turns: tuple[Turn, ...]) -> tuple[str, tuple[Turn, ...]]:
    """The last real user message (its text) and the turns after it (heartbeats are not real)."""
    for index in range(len(turns) - 1, -1, -1):
        turn = turns[index]
        if turn.role == "user" and not is_heartbeat(turn.text):
            return unwrap(turn.text), turns[index + 1 :]
    return "", turns


def _named_tool(tools: Mapping[str, ToolSpec], text: str) -> ToolSpec | None:
    lowered = text.lower()
    found = [
        (position, -len(name), tool)
        for name, tool in tools.items()
        if name not in NON_CUSTOM and (position := mention_at(lowered, name.lower())) >= 0
    ]
    return min(found, key=lambda f: (f[0], f[1]))[2] if found else None


def _summary(result: Turn) -> str:
    name = result.tool_name or "the tool"
    content = unwrap_result(result.text)
    if result.is_error:
        return f"Sorry, {name} failed: {snip(content)}"
    if result.tool_name in V1_MEMORY_WRITERS:
        return "Got it, I have saved that to my memory."
    if result.tool_name == SEND_MESSAGE:
        return "Is there anything else I can help you with?"
    return f"{name} returned: {snip(content)}"


def _reply_text(model_input: ModelInput) -> str:
    user_text, _ = _last_user(model_input.turns)
    if not user_text.strip():
        return "Hello! How can I help you today?"
    return f'You said: "{snip(user_text.strip())}". Thanks for letting me know!'
