"""The agents a poller submitted, kept as its steps wrote them, for their next steps.

Every step of a batch run loads its agents (their rows, blocks and tools), and the step before
loaded and wrote the same agents: loading them is most of what writing a step costs beside the
step's own work. ``AgentCache`` keeps each agent as it was stored when its step was submitted,
and the next load checks the ones it holds with ``agents.unchanged``'s two narrow queries instead
of reading them again: an agent written since (by the API, a synchronous step, another poller),
or whose blocks or tools were edited, fails the check and is read again, as are those not held.

With each agent it keeps the first message of its window, its system message, when the submit
had it in hand as written (``first_messages``): a step checks whether memory changed against it,
and reads it otherwise. A system message is rewritten only when its agent's prompt or blocks
change, which moves the agent's row or a block's: an agent loaded and found unchanged, or made
from one with the very same prompt and blocks, still has it as kept.

What is kept is only what is stored, committed: the agents a submit read or checked after their
step's write (what a step reads it then writes, so it keeps nothing of that). Not kept: an agent
that manages a group (its group's turns move without its row). Each process has its own: nothing
is shared, and nothing needs telling when another one writes. Its bound and how it makes room
are ``store/held.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.agents import Agent
from nightshift.domain.messages import Message
from nightshift.store import agents as agent_store
from nightshift.store import message_cache
from nightshift.store.held import HeldCache

# What an agent held costs beyond its texts, in bytes: the object, its LLM config, rules, tags and
# timestamps, and the cache's own entry (its tools are shared with the agents loaded with it), as
# measured for new agents (see the tests); each of its blocks and window's message ids adds its own.
AGENT_OVERHEAD = 1600
BLOCK_OVERHEAD = 700
MESSAGE_ID_BYTES = 110


def held_bytes(agent: Agent) -> int:
    """About what ``agent`` takes in memory: its texts (one byte per character, as most are) and
    the overheads above."""
    size = AGENT_OVERHEAD + len(agent.system) + MESSAGE_ID_BYTES * len(agent.message_ids)
    for block in agent.blocks:
        size += BLOCK_OVERHEAD + len(block.value) + len(block.description or "")
    return size


class _Kept:
    __slots__ = ("agent", "first")

    def __init__(self, agent: Agent, first: Message | None) -> None:
        self.agent, self.first = agent, first


class AgentCache(HeldCache[_Kept]):
    """Agents by id, read through to the database (see the module); holds ``max_bytes`` at most."""

    async def load(self, conn: AsyncConnection, org_id: str, ids: Sequence[str]) -> dict[str, Agent]:
        """What ``agents.load_agents`` returns: the agents held and unchanged, and the others read
        (two statements when all are held and unchanged; five at most, as ``load_agents`` makes
        three)."""
        held = self.held
        now = held.clock.monotonic()
        wanted = list(dict.fromkeys(ids))
        found = {}
        for agent_id in wanted:
            kept = held.get(agent_id, now)
            if kept is not None and kept.agent.organization_id == org_id:
                found[agent_id] = kept.agent
        same, _ = await agent_store.unchanged(conn, org_id, found)
        for agent_id in found.keys() - same.keys():
            held.drop(agent_id)  # changed (and read again below) or deleted
        return same | await agent_store.load_agents(conn, org_id, [i for i in wanted if i not in same])

    def keep(self, agents: Iterable[Agent], messages: Mapping[str, Message] | None = None) -> None:
        """Hold ``agents``, as stored now (room permitting), for their next loads; with each, its
        system message when ``messages`` (by id, as stored now) holds it, or the one kept with it
        before when that still holds (see ``first_messages``)."""
        held = self.held
        now = held.clock.monotonic()
        for agent in agents:
            if agent.group is not None:
                continue
            first = messages.get(agent.message_ids[0]) if messages and agent.message_ids else None
            first = first or self._first_message(agent)
            size = held_bytes(agent) + (message_cache.held_bytes(first) if first is not None else 0)
            held.keep(agent.id, _Kept(agent, first), size, now)

    def first_messages(self, agents: Iterable[Agent]) -> dict[str, Message]:
        """The system messages, by id, kept with agents of the same prompt and blocks as these
        (the very same objects: loaded unchanged, or copied from such an agent since): they are
        as stored, and compiled from them."""
        return {first.id: first for agent in agents if (first := self._first_message(agent)) is not None}

    def _first_message(self, agent: Agent) -> Message | None:
        kept = self.held.peek(agent.id)
        if (
            kept is not None
            and kept.first is not None
            and agent.message_ids[:1] == (kept.first.id,)
            and agent.system is kept.agent.system
            and agent.blocks is kept.agent.blocks
        ):
            return kept.first
        return None
