"""An agent's in-context window against its context window: its size, and summaries of what leaves it.

The decisions are ``domain.context_window``'s; this counts the tokens (``providers.tokens``),
builds the summarizing request and the window that follows it. Batch and synchronous steps both
go through here: a batch step sends the summarizing request in its provider batch, a synchronous
one calls the model at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from nightshift.domain.agents import Agent
from nightshift.domain.context_window import (
    SummaryPlan,
    choose_eviction,
    is_summary,
    summary_notice,
    summary_tokens,
)
from nightshift.domain.messages import Message, MessageKind, Role, inner_text, said_text
from nightshift.ids import new_id
from nightshift.providers.base import ModelRequest
from nightshift.providers.tokens import message_tokens, messages_tokens, text_counter, tools_tokens
from nightshift.runtime.memory import compile_blocks, compile_metadata

SUMMARIZER_PROMPT = """You keep the memory of a long conversation between an AI agent, its user and \
its tools. The oldest part of the conversation is leaving the agent's context window; write the \
summary that will stand in for it. If the transcript starts with an earlier summary, fold it in. \
Keep what the agent needs to carry on: the user's requests and goals, facts learned, decisions \
made, tool results that matter, and what is still to do. Write plain prose in the agent's point of \
view ("I ..."), with no preamble, in at most {words} words."""

# A message of the transcript is cut to this many characters: the summary is at most a few
# thousand tokens, and the messages stay searchable in full.
TRANSCRIPT_MESSAGE_CHARS = 4_000


def request_tokens(agent: Agent, window: Sequence[Message]) -> int:
    """The tokens of the request ``window`` (the system message first) makes, counted in full."""
    provider = agent.llm_config.provider
    return messages_tokens(provider, window) + tools_tokens(provider, (t.json_schema for t in agent.tools))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextOverview:
    """What an agent's next request holds, part by part, in tokens (Letta's context-window overview)."""

    limit: int
    current: int
    system_prompt: str
    system_tokens: int
    core_memory: str
    core_memory_tokens: int
    memory_metadata: str
    memory_metadata_tokens: int
    summary: str | None
    summary_tokens: int
    tools: tuple[dict[str, object], ...]
    tools_tokens: int
    messages: tuple[Message, ...]  # the window after the system message (the summary included)
    messages_tokens: int
    recall_count: int
    archival_count: int


def context_overview(
    agent: Agent, window: Sequence[Message], *, recall_count: int, archival_count: int, now: datetime
) -> ContextOverview:
    """The overview of ``agent``'s request, its window (system message first) counted in full.

    ``current`` is the size nightshift goes by: the provider's last count plus the estimate of
    what was added since, or the full count when there is none yet.
    """
    provider = agent.llm_config.provider
    count = text_counter(provider)
    core = compile_blocks(agent.blocks)
    metadata = compile_metadata(now=now, recall_count=recall_count, archival_count=archival_count)
    rest = tuple(window[1:])
    summary = next((m for m in rest if is_summary(m)), None)
    schemas = tuple(t.json_schema for t in agent.tools)
    counted = request_tokens(agent, window)
    return ContextOverview(
        limit=agent.llm_config.context_window,
        current=agent.context_tokens if agent.context_tokens is not None else counted,
        system_prompt=agent.system,
        system_tokens=count(agent.system),
        core_memory=core,
        core_memory_tokens=count(core),
        memory_metadata=metadata,
        memory_metadata_tokens=count(metadata),
        summary=inner_text(summary.text) if summary else None,
        summary_tokens=message_tokens(provider, summary) if summary else 0,
        tools=schemas,
        tools_tokens=tools_tokens(provider, schemas),
        messages=rest,
        messages_tokens=messages_tokens(provider, rest),
        recall_count=recall_count,
        archival_count=archival_count,
    )


def added_tokens(agent: Agent, messages: Sequence[Message]) -> int | None:
    """The agent's ``context_tokens`` once ``messages`` are appended (None stays unknown)."""
    if agent.context_tokens is None:
        return None
    return agent.context_tokens + messages_tokens(agent.llm_config.provider, messages)


def system_change_tokens(agent: Agent, old: str, new: str) -> int:
    """How many tokens the system message's rewrite from ``old`` to ``new`` adds (or removes)."""
    count = text_counter(agent.llm_config.provider)
    return count(new) - count(old)


def plan_summary(agent: Agent, window: Sequence[Message], *, model: str | None) -> SummaryPlan | None:
    """What to evict from ``window`` (the agent's, system message first) and summarize, or None
    when nothing can be (see ``choose_eviction``). ``model`` writes the summary (None: the agent's own)."""
    assert agent.context_tokens is not None
    provider = agent.llm_config.provider
    sizes = [message_tokens(provider, m) for m in window[1:]]
    cut = choose_eviction(
        [(m.role, size) for m, size in zip(window[1:], sizes, strict=True)],
        total=agent.context_tokens,
        config=agent.llm_config,
    )
    if cut is None:
        return None
    return SummaryPlan(
        evicted=tuple(m.id for m in window[1 : 1 + cut]),
        evicted_tokens=sum(sizes[:cut]),
        model=model or agent.llm_config.handle,
        max_tokens=summary_tokens(agent.llm_config),
    )


def summary_request(agent: Agent, plan: SummaryPlan, stored: Mapping[str, Message]) -> ModelRequest:
    """The request that summarizes the plan's messages: a transcript of them, no tools."""
    model = plan.model.partition("/")[2]
    transcript = "\n".join(_transcript_line(stored[i]) for i in plan.evicted if i in stored)
    words = max(50, plan.max_tokens * 3 // 5)
    return ModelRequest(
        model=model,
        system=SUMMARIZER_PROMPT.format(words=words),
        messages=(
            Message(
                id=new_id("message"),
                organization_id=agent.organization_id,
                agent_id=agent.id,
                role=Role.USER,
                text=f"The conversation to summarize:\n\n{transcript}",
                created_at=agent.updated_at,
            ),
        ),
        max_tokens=plan.max_tokens,
        require_tool_call=False,
    )


def _transcript_line(message: Message) -> str:
    if is_summary(message):
        text = inner_text(message.text)
        return f"[earlier summary] {text}"
    if message.role is Role.TOOL:
        text = f"[result of {message.name or 'a tool'}] {inner_text(message.text)}"
    elif message.role is Role.ASSISTANT:
        calls = "; ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        parts = [p for p in (message.reasoning, said_text(message) if not calls else message.text) if p]
        if calls:
            parts.append(f"called {calls}")
        text = "[agent] " + " ".join(parts)
    else:
        said = message.role.value if message.kind is MessageKind.PLAIN else message.kind.value
        text = f"[{said}] {inner_text(message.text)}"
    return text if len(text) <= TRANSCRIPT_MESSAGE_CHARS else text[:TRANSCRIPT_MESSAGE_CHARS] + " ..."


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """A summary the model wrote for an agent's plan, and where its message belongs (a batch
    item, or a synchronous run and step)."""

    agent_id: str
    plan: SummaryPlan
    text: str
    batch_item_id: str | None = None
    run_id: str | None = None
    step_id: str | None = None


def summarized(agent: Agent, summary: Summary, now: datetime) -> tuple[Agent, Message]:
    """The agent with the plan's messages replaced by the summary in its window, and the summary's message.

    The evicted messages stay in the database (and in ``conversation_search``); only the window
    forgets them.
    """
    plan = summary.plan
    message = Message(
        id=new_id("message"),
        organization_id=agent.organization_id,
        agent_id=agent.id,
        role=Role.USER,
        text=summary_notice(summary.text.strip() or "(no summary)", evicted=len(plan.evicted), now=now),
        created_at=now,
        batch_item_id=summary.batch_item_id,
        run_id=summary.run_id,
        step_id=summary.step_id,
        kind=MessageKind.SUMMARY,
    )
    evicted = set(plan.evicted)
    system, *rest = agent.message_ids
    window = (system, message.id, *(i for i in rest if i not in evicted))
    tokens = (
        None
        if agent.context_tokens is None
        else max(0, agent.context_tokens - plan.evicted_tokens) + message_tokens(agent.llm_config.provider, message)
    )
    return replace(agent, message_ids=window, context_tokens=tokens, updated_at=now), message
