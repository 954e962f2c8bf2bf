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

Its bound and how it makes room are ``store/held.py``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from nightshift.domain.messages import Message
from nightshift.store import messages as message_store
from nightshift.store.held import HeldCache

# What a message held costs beyond its texts, in bytes: the object, its ids, its timestamp and the
# cache's own entry, as measured for the messages of new agents' windows (see the tests).
MESSAGE_OVERHEAD = 1600


def held_bytes(message: Message) -> int:
    """About what ``message`` takes in memory: its texts (one byte per character, as most are)
    and ``MESSAGE_OVERHEAD``."""
    size = MESSAGE_OVERHEAD + len(message.text) + len(message.reasoning or "")
    for call in message.tool_calls:
        size += len(call.id) + len(call.name) + len(call.arguments) + len(call.signature or "")
    for image in message.images:
        size += len(image.data or image.url or "")
    return size + sum(map(len, message.stdout)) + sum(map(len, message.stderr))


class MessageCache(HeldCache[Message]):
    """Messages by id, read through to the database (see the module); holds ``max_bytes`` at most."""

    async def get(
        self, conn: AsyncConnection, ids: Sequence[str], *, never: Collection[str] = ()
    ) -> dict[str, Message]:
        """The messages of ``ids`` that exist, by id: those held, and the others read in one
        statement and kept (room permitting) but those in ``never`` (read each time: they may change)."""
        held = self.held
        now = held.clock.monotonic()
        found, missing = {}, []
        for message_id in ids:
            message = held.get(message_id, now)
            if message is None:
                missing.append(message_id)
            else:
                found[message_id] = message
        if missing:
            read = await message_store.get_messages(conn, missing)
            found |= read
            for message in read.values():
                if message.id not in never:
                    held.keep(message.id, message, held_bytes(message), now)
        return found
