"""The messages a poller read for its requests, kept for the next step's.

Every step of a batch run builds each agent's request from its whole window, which the step
before read too, a few messages shorter: reading a message back and making it an object again
costs about as much as the rest of its share of the request. A stored message never changes,
but for the first of an agent's window (its system message, rewritten whenever its memory or
prompt is), and no two messages share an id, so a message read once is as good as read again.

``MessageCache`` keeps what it read, but the windows' first messages, up to a bound on their
estimated size, and reads the others in one statement. Only what was read from the database is
kept (committed and cleaned as it is stored), never a message a step has in hand. Each process
has its own: nothing is shared, and nothing needs telling when another process writes (a deleted
message is never asked for again: no window holds its id).

When it is full, a message makes room only by taking the place of the least recently used, and
only of one unused for ``IN_USE_SECONDS``. The steps of a run go through the same windows again
and again: when they hold more than the cache does, it keeps a part of them from one step to the
next (with plain least-recently-used order each step would push out what the next one reads
first, and keep nothing of use, at a cost for every message).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.clock import SYSTEM_CLOCK, Clock
from nightshift.domain.messages import Message
from nightshift.store import messages as message_store

# What a message held costs beyond its texts, in bytes: the object, its ids, its timestamp and the
# cache's own entry, as measured for the messages of new agents' windows (see the tests).
MESSAGE_OVERHEAD = 1600
# A message used this recently is in use: a step of its agent is expected again (a provider batch
# ends within minutes to an hour, as a rule), and it is not pushed out for another.
IN_USE_SECONDS = 3600.0


def held_bytes(message: Message) -> int:
    """About what ``message`` takes in memory: its texts (one byte per character, as most are)
    and ``MESSAGE_OVERHEAD``."""
    size = MESSAGE_OVERHEAD + len(message.text) + len(message.reasoning or "")
    for call in message.tool_calls:
        size += len(call.id) + len(call.name) + len(call.arguments) + len(call.signature or "")
    for image in message.images:
        size += len(image.data or image.url or "")
    return size + sum(map(len, message.stdout)) + sum(map(len, message.stderr))


class _Held:
    __slots__ = ("message", "size", "used")

    def __init__(self, message: Message, size: int, used: float) -> None:
        self.message, self.size, self.used = message, size, used


class MessageCache:
    """Messages by id, read through to the database (see the module); holds ``max_bytes`` at most."""

    def __init__(self, max_bytes: int, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self._clock = clock
        self._held: OrderedDict[str, _Held] = OrderedDict()  # the least recently used first

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._held

    async def get(
        self, conn: AsyncConnection, ids: Sequence[str], *, never: Collection[str] = ()
    ) -> dict[str, Message]:
        """The messages of ``ids`` that exist, by id: those held, and the others read in one
        statement and kept (room permitting) but those in ``never`` (read each time: they may change)."""
        now = self._clock.monotonic()
        held, found, missing = self._held, {}, []
        for message_id in ids:
            entry = held.get(message_id)
            if entry is None:
                missing.append(message_id)
            else:
                held.move_to_end(message_id)
                entry.used = now
                found[message_id] = entry.message
        if missing:
            read = await message_store.get_messages(conn, missing)
            found |= read
            self._keep((m for m in read.values() if m.id not in never), now)
        return found

    def _keep(self, messages: Iterable[Message], now: float) -> None:
        held = self._held
        for message in messages:
            if message.id in held:
                continue  # kept meanwhile by another caller's read (they share the cache)
            size = held_bytes(message)
            while held and self.held_bytes + size > self.max_bytes:
                oldest = next(iter(held.values()))
                if now - oldest.used < IN_USE_SECONDS:
                    return  # full of messages in use: they stay
                held.popitem(last=False)
                self.held_bytes -= oldest.size
            if self.held_bytes + size <= self.max_bytes:
                held[message.id] = _Held(message, size, now)
                self.held_bytes += size
