"""What the model sees: input messages, and the provider requests built from agents' in-context windows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agents import Agent
from nightshift.domain.batches import StepState
from nightshift.domain.context_window import (
    Pressure,
    SummaryPlan,
    pressure,
    pressure_notice,
    prompt_room,
)
from nightshift.domain.messages import Image, Message, MessageKind, Role
from nightshift.domain.solver import ToolRulesSolver
from nightshift.domain.tools import Tool, schema_problem
from nightshift.errors import ProviderError
from nightshift.ids import new_id
from nightshift.providers.base import ModelRequest
from nightshift.providers.registry import provider_info
from nightshift.providers.spool import EncodedRequests
from nightshift.runtime.caching import IN_CALL, CacheTiming, with_cache_plans
from nightshift.runtime.memory import compile_system_message, memory_changed
from nightshift.runtime.window import (
    added_tokens,
    plan_summary,
    request_tokens,
    summary_request,
    system_change_tokens,
)
from nightshift.store import agents as agent_store
from nightshift.store import messages as message_store
from nightshift.store import passages as passage_store
from nightshift.store.message_cache import MessageCache

# A step reads its agents' windows this many messages at a time (to build their requests, see
# ``encoded_requests``, and to count or summarize those that need it): what a step of long
# windows holds at once, while a step of short ones is still read in one statement.
WINDOW_SLICE = 50_000
HEARTBEAT_REASON = "You asked for another turn (request_heartbeat=true); continue where you left off."
# A letta_v1 agent has no heartbeats to ask for: it gets this turn only when it answered while a
# required_before_exit tool was still uncalled.
REQUIRED_TOOLS_REASON = "You are not done yet: call the tools your rules require before you answer."


def user_message(
    agent: Agent,
    text: str,
    now: datetime,
    *,
    batch_item_id: str | None = None,
    kind: MessageKind = MessageKind.PLAIN,
    otid: str | None = None,
    images: Sequence[Image] = (),
    name: str | None = None,
) -> Message:
    """A message from the user to ``agent`` (or, of another ``kind``, from the system in the user's turn)."""
    return Message(
        id=new_id("message"),
        organization_id=agent.organization_id,
        agent_id=agent.id,
        role=Role.USER,
        text=text,
        created_at=now,
        batch_item_id=batch_item_id,
        kind=kind,
        otid=otid,
        images=tuple(images),
        name=name,
    )


def heartbeat_message(agent: Agent, now: datetime, *, batch_item_id: str | None = None) -> Message:
    """The automatic user turn that gives an agent the next step it asked for (or its rules hold it to)."""
    reason = HEARTBEAT_REASON if agent.agent_type.heartbeats else REQUIRED_TOOLS_REASON
    body = {"type": "heartbeat", "reason": reason, "time": now.isoformat()}
    return user_message(agent, json.dumps(body), now, batch_item_id=batch_item_id, kind=MessageKind.HEARTBEAT)


class StepInputs:
    """Input messages and system-message refreshes for the agents of one step, written in bulk.

    ``add`` the inputs, ``prepare`` (refresh the system messages whose memory changed, count the
    windows, give memory-pressure notices and plan the summaries the windows need), then ``write``,
    all at ``now``. After ``prepare``, ``summaries`` holds the agents whose step must wait for a
    summary; ``agents`` holds them as ``write`` stores them (their ``updated_at`` moved to ``now``);
    ``known`` holds, by id, the messages of their windows that the step has in hand as written:
    its inputs and notices, and each agent's system message (see ``build_requests``).

    ``systems``: system messages, by id, known to be as stored and compiled from their agents'
    prompts and blocks as they are now (a poller's kept agents', ``store/agent_cache.py``): they
    are neither read again nor checked for changed memory.
    """

    def __init__(
        self,
        now: datetime,
        *,
        summary_model: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
        systems: Mapping[str, Message] | None = None,
    ) -> None:
        self.now = now
        self._systems = systems or {}
        self.messages: list[Message] = []
        self._run_id, self._step_id = run_id, step_id  # of the notices, in a synchronous run
        self.agents: dict[str, Agent] = {}
        self.summaries: dict[str, SummaryPlan] = {}
        self.known: dict[str, Message] = {}
        self._summary_model = summary_model
        self._before: dict[str, int | None] = {}
        self._item: dict[str, str | None] = {}

    def add(
        self,
        agent: Agent,
        inputs: Sequence[Message],
        *,
        before: int | None = None,
        batch_item_id: str | None = None,
    ) -> Agent:
        """Append ``inputs`` to ``agent``'s in-context window; returns the updated agent.

        ``before`` is the size of the agent's last request, if known (a notice is given when the
        window goes past the pressure threshold since then); without it, the size it has now.
        """
        updated = replace(
            agent,
            message_ids=(*agent.message_ids, *(m.id for m in inputs)),
            context_tokens=added_tokens(agent, inputs),
            updated_at=self.now,
        )
        self.messages.extend(inputs)
        self.agents[agent.id] = updated
        self._before[agent.id] = before if before is not None else agent.context_tokens
        self._item[agent.id] = batch_item_id
        return updated

    async def prepare(self, conn: AsyncConnection) -> None:
        """Bring the system messages and sizes up to date; decide notices and summaries (see the class)."""
        now = self.now
        # The system messages are read whole (their texts are checked for changed memory): a
        # request built right after the write has them in hand (``known``).
        systems: dict[str, Message] = {}
        unsure: list[Agent] = []  # whose system messages are read, and checked
        for agent in self.agents.values():
            if agent.message_ids:
                first = self._systems.get(agent.message_ids[0])
                if first is None:
                    unsure.append(agent)
                else:
                    systems[first.id] = first
        read = await message_store.get_messages(conn, [a.message_ids[0] for a in unsure])
        systems |= read
        texts = {message_id: message.text for message_id, message in read.items()}
        changed = await refresh_system_messages(conn, unsure, now, texts=texts)
        for agent_id, change in changed.items():
            agent = self.agents[agent_id]
            systems[agent.message_ids[0]] = replace(systems[agent.message_ids[0]], text=change[1])
            if agent.context_tokens is not None:
                delta = system_change_tokens(agent, *change)
                self.agents[agent_id] = replace(agent, context_tokens=agent.context_tokens + delta)
        unknown = [a for a in self.agents.values() if a.context_tokens is None and a.message_ids]
        for part in _window_slices(unknown, WINDOW_SLICE):  # never counted (an imported agent's)
            windows = await self._windows(conn, part)
            for agent in part:
                self.agents[agent.id] = replace(agent, context_tokens=request_tokens(agent, windows[agent.id]))
        over: list[Agent] = []
        for agent in list(self.agents.values()):
            assert agent.context_tokens is not None or not agent.message_ids
            decision = pressure(agent.llm_config, agent.context_tokens or 0, before=self._before[agent.id])
            if decision is Pressure.SUMMARIZE:
                over.append(agent)
            elif decision is Pressure.NOTICE:
                notice = replace(
                    user_message(
                        agent,
                        pressure_notice(now),
                        now,
                        batch_item_id=self._item[agent.id],
                        kind=MessageKind.MEMORY_PRESSURE,
                    ),
                    run_id=self._run_id,
                    step_id=self._step_id,
                )
                self.messages.append(notice)
                self.agents[agent.id] = replace(
                    agent,
                    message_ids=(*agent.message_ids, notice.id),
                    context_tokens=added_tokens(agent, [notice]),
                )
        for part in _window_slices(over, WINDOW_SLICE):
            windows = await self._windows(conn, part)
            for agent in part:
                plan = plan_summary(agent, windows[agent.id], model=self._summary_model)
                if plan is not None:
                    self.summaries[agent.id] = plan
        self.known = systems | {m.id: m for m in self.messages}

    async def _windows(self, conn: AsyncConnection, agents: Sequence[Agent]) -> dict[str, list[Message]]:
        """The in-context messages of ``agents``, from the database and from this step's inputs."""
        if not agents:
            return {}
        stored = await message_store.get_messages(conn, [i for a in agents for i in a.message_ids])
        stored.update((m.id, m) for m in self.messages)
        return {a.id: [stored[i] for i in a.message_ids if i in stored] for a in agents}

    async def write(self, conn: AsyncConnection) -> None:
        """Persist the inputs (and notices), the windows and their sizes."""
        await message_store.insert_messages(conn, self.messages)
        await agent_store.set_windows(conn, list(self.agents.values()), self.now)


async def refresh_system_messages(
    conn: AsyncConnection, agents: Sequence[Agent], now: datetime, *, texts: Mapping[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """Rewrite, in bulk, the system message of each agent whose prompt or core memory changed.

    ``texts``: the stored text of each message first in the agents' windows, by message id, when
    the caller has read them (they are read here otherwise). Returns the old and new text of each
    rewritten one, by agent id.
    """
    current = (
        texts
        if texts is not None
        else await message_store.message_texts(conn, [a.message_ids[0] for a in agents if a.message_ids])
    )
    stale = [
        a
        for a in agents
        if a.message_ids
        and a.message_ids[0] in current
        and memory_changed(current[a.message_ids[0]], a.system, a.blocks)
    ]
    if not stale:
        return {}
    ids = [a.id for a in stale]
    recall = await message_store.count_messages(conn, ids)
    archival = await passage_store.count_passages(conn, ids)
    texts = {
        a.id: compile_system_message(
            a.system, a.blocks, now=now, recall_count=recall[a.id], archival_count=archival[a.id]
        )
        for a in stale
    }
    await message_store.update_system_texts(conn, [(a.message_ids[0], texts[a.id]) for a in stale])
    return {a.id: (current[a.message_ids[0]], texts[a.id]) for a in stale}


async def build_requests(
    conn: AsyncConnection,
    agents: Sequence[Agent],
    states: Mapping[str, StepState],
    caching: CacheTiming = IN_CALL,
    known: Mapping[str, Message] | None = None,
    cache: MessageCache | None = None,
) -> tuple[dict[str, ModelRequest], dict[str, str]]:
    """One request per agent from its in-context window, with the tools its step allows and, for
    a provider whose cache is written where a request marks it, the breakpoints ``caching`` gives.

    Returns the requests and, for each agent whose request cannot be built (no system message
    in its window, a window too big for its context window, a tool with an unusable schema), why;
    those agents have no request. An agent whose step waits for a summary (``StepState.summary``)
    gets the summarizing request. The messages of all agents are loaded in one statement, but
    those in ``known`` (by id: messages as the caller wrote them, in this transaction or since
    nothing changed them; see ``StepInputs.known``) and those ``cache`` holds (a poller's, which
    keeps what it reads: only where ``conn`` sees committed messages alone).
    """
    known = known or {}
    ids = [message_id for agent in agents for message_id in agent.message_ids if message_id not in known]
    if cache is None:
        stored = await message_store.get_messages(conn, ids)
    else:
        stored = await cache.get(conn, ids, never={a.message_ids[0] for a in agents if a.message_ids})
    if known:
        stored |= {i: known[i] for agent in agents for i in agent.message_ids if i in known}
    requests: dict[str, ModelRequest] = {}
    problems: dict[str, str] = {}
    checked: dict[str, str | None] = {}  # the agents share their tools: each is checked once
    for agent in agents:
        plan = states[agent.id].summary
        if plan is not None:
            requests[agent.id] = summary_request(agent, plan, stored)
            continue
        window = [stored[i] for i in agent.message_ids if i in stored]
        if not window or window[0].role is not Role.SYSTEM:
            problems[agent.id] = "the agent has no system message in its context window"
            continue
        room = prompt_room(agent.llm_config)
        if agent.context_tokens is not None and agent.context_tokens > room:
            problems[agent.id] = (
                f"its request (about {agent.context_tokens} tokens) does not fit its context window of "
                f"{agent.llm_config.context_window} tokens ({room} for the prompt), and its newest messages "
                "cannot be summarized away: raise its context_window_limit or lower its tools' return_char_limit"
            )
            continue
        allowed = set(states[agent.id].allowed_tools)
        offered = [t for t in agent.tools if not allowed or t.name in allowed]
        broken = next(((t, p) for t in offered if (p := _problem(t, checked)) is not None), None)
        if broken is not None:
            tool, problem = broken
            problems[agent.id] = f"its tool {tool.name!r} cannot be offered to the model: {problem}"
            continue
        # The client-side tools of the run come along whatever the rules allow (the client runs them).
        client = [c.json_schema() for c in states[agent.id].client_tools if agent.tool(c.name) is None]
        requests[agent.id] = ModelRequest.from_config(
            agent.llm_config,
            system=window[0].text,
            messages=window[1:],
            tools=[t.json_schema for t in offered] + client,
            require_tool_call=_must_call(agent, states[agent.id]),
            agent_arguments=agent.agent_type.heartbeats,
        )
    # A summarizing request is asked once: nothing reads its prompt back.
    marked = {
        a.id
        for a in agents
        if a.id in requests and states[a.id].summary is None and provider_info(a.llm_config.provider).cache_rates
    }
    if marked:
        requests |= with_cache_plans({i: requests[i] for i in marked}, states, caching)
    return requests, problems


async def encoded_requests(
    conn: AsyncConnection,
    agents: Sequence[Agent],
    states: Mapping[str, StepState],
    caching: CacheTiming,
    encode: Callable[[str, ModelRequest], bytes],
    *,
    known: Mapping[str, Message] | None = None,
    cache: MessageCache | None = None,
    slice_messages: int = WINDOW_SLICE,
) -> tuple[EncodedRequests, dict[str, str]]:
    """A batch's requests (see ``build_requests``), each encoded by ``encode`` (the provider's
    ``encode_request``) as soon as it is built and kept in a file, by agent id in ``agents``' order;
    and why the others have none (a request the provider cannot take among them). ``known`` and
    ``cache``: the messages not to read again (see ``build_requests``).

    The windows are read a slice at a time (of about ``slice_messages`` messages), so that a batch
    holds one slice's messages, never every window as objects, nor every request's bytes. A
    prompt-cache plan counts the agents that share a prefix within the slice: dozens of agents
    even with windows of a thousand messages, past which the share of the cache write each pays
    barely moves its cost.
    """
    encoded = EncodedRequests()
    problems: dict[str, str] = {}
    for part in _window_slices(agents, slice_messages):
        requests, refused = await build_requests(conn, part, states, caching, known, cache)
        problems |= refused
        for agent in part:
            request = requests.get(agent.id)
            if request is None:
                continue
            try:
                encoded.add(agent.id, encode(agent.id, request))
            except ProviderError as exc:
                problems[agent.id] = f"the provider cannot take it: {exc.message}"
    return encoded, problems


def _window_slices(agents: Sequence[Agent], size: int) -> Iterator[Sequence[Agent]]:
    start = held = 0
    for end, agent in enumerate(agents, 1):
        held += len(agent.message_ids)
        if held >= size:
            yield agents[start:end]
            start, held = end, 0
    if start < len(agents):
        yield agents[start:]


def _must_call(agent: Agent, state: StepState) -> bool:
    """Whether the agent's next answer must be a tool call: always in the memgpt loops (the model
    speaks through send_message); for a letta_v1 agent only when its tool rules force one."""
    if agent.agent_type.heartbeats:
        return True
    return ToolRulesSolver(agent.tool_rules, state.solver).forces_call()


def _problem(tool: Tool, checked: dict[str, str | None]) -> str | None:
    if tool.id not in checked:
        checked[tool.id] = schema_problem(tool.json_schema)
    return checked[tool.id]
