"""Who runs next in the tool sandbox: its workers shared fairly among organizations.

:class:`Turns` hands out the pool's ``workers`` turns (one turn: one call running on one zygote).
The policy, which :mod:`nightshift.tools.sandbox` documents for users:

* **Work-conserving.** A free turn is never held back: a lone organization gets every one.
* **Fewest running first.** When calls wait, a turn that frees goes to the organization with the
  fewest calls running; among equals, to the one served longest ago (one not served yet first,
  then the one whose call has waited longest). A second organization therefore gets the first
  turn that frees (never waits behind the first's backlog), and organizations that all have calls
  waiting converge on equal shares of the workers, taking turns.
* **First come, first served within an organization.** A caller with many calls (a batch step)
  waits with one call at a time per lane and queues again after each, so an organization's
  single call (a tool run from the API) comes after at most a lane's worth of its batch.
* **Bounded.** At most ``queue_limit`` callers of one organization wait at once; the next is
  refused at once (:meth:`join` is False), and never makes another organization's calls fail.

Nothing here starts processes or looks at time: it is plain bookkeeping on the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field


class Closed(Exception):
    """The pool closed while a call waited for its turn."""


@dataclass(eq=False, slots=True)
class _Ticket:
    """One call waiting for a turn; ``order`` says who came first across organizations."""

    order: int
    granted: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Turns:
    """The turns of a pool of ``workers``, shared among organizations (see the module docstring).

    A caller (one call, or one organization's part of a batch of calls) :meth:`join`\\ s once,
    then :meth:`take`\\ s a turn for each call and :meth:`give_back`\\ s it when the call is done,
    and :meth:`leave`\\ s once it will take no more.
    """

    def __init__(self, workers: int, *, queue_limit: int) -> None:
        """Args:
        workers: How many calls run at once.
        queue_limit: How many callers of one organization may wait at once.
        """
        if workers < 1 or queue_limit < 1:
            raise ValueError("Turns needs workers >= 1 and queue_limit >= 1")
        self.workers = workers
        self.queue_limit = queue_limit
        self._free = workers
        self._running: dict[str, int] = {}  # organization -> its calls holding a turn
        self._callers: dict[str, int] = {}  # organization -> its callers that joined and have not left
        self._waiting: dict[str, deque[_Ticket]] = {}  # organization -> its tickets, oldest first; never empty
        self._order = itertools.count()
        # Organization -> when it last got a turn, while it has calls running or waiting.
        self._served: dict[str, int] = {}
        self._serving = itertools.count()
        self._closed = False

    def join(self, org_id: str) -> bool:
        """Count a caller of ``org_id``; False (and nothing counted) when its queue is full."""
        callers = self._callers.get(org_id, 0)
        if callers >= self.queue_limit:
            return False
        self._callers[org_id] = callers + 1
        return True

    def leave(self, org_id: str) -> None:
        """A caller that joined will take no more turns."""
        callers = self._callers[org_id] - 1
        if callers:
            self._callers[org_id] = callers
        else:
            del self._callers[org_id]

    async def take(self, org_id: str) -> None:
        """Wait for a turn for one call of ``org_id``.

        Raises:
            Closed: The pool closed (before or while it waited).
        """
        if self._closed:
            raise Closed
        if self._free:  # a free turn means nobody waits: every free turn is handed out at once
            self._hold(org_id)
            return
        ticket = _Ticket(next(self._order))
        self._waiting.setdefault(org_id, deque()).append(ticket)
        try:
            granted = await ticket.granted
        except asyncio.CancelledError:
            if ticket.granted.done() and not ticket.granted.cancelled():
                if ticket.granted.result():  # handed a turn it will not use: the next in line gets it
                    self.give_back(org_id)
            else:
                self._forget(org_id, ticket)
            raise
        if not granted:
            raise Closed

    def give_back(self, org_id: str) -> None:
        """A call of ``org_id`` is done with its turn; the next in line (see the policy) gets it."""
        running = self._running[org_id] - 1
        if running:
            self._running[org_id] = running
        else:
            del self._running[org_id]
            self._forget_if_idle(org_id)
        self._free += 1
        self._hand_out()

    def close(self) -> None:
        """Refuse every call from now on and wake those that wait (their :meth:`take` raises)."""
        self._closed = True
        waiting, self._waiting = self._waiting, {}
        for tickets in waiting.values():
            for ticket in tickets:
                if not ticket.granted.done():
                    ticket.granted.set_result(False)

    def running(self, org_id: str) -> int:
        """How many calls of ``org_id`` hold a turn."""
        return self._running.get(org_id, 0)

    def _hold(self, org_id: str) -> None:
        self._free -= 1
        self._running[org_id] = self._running.get(org_id, 0) + 1
        self._served[org_id] = next(self._serving)

    def _hand_out(self) -> None:
        while self._free and self._waiting:
            org_id = min(self._waiting, key=self._precedence)
            tickets = self._waiting[org_id]
            ticket = tickets.popleft()
            if not tickets:
                del self._waiting[org_id]
            if ticket.granted.done():  # its caller was cancelled and has not run yet to forget it
                self._forget_if_idle(org_id)
                continue
            self._hold(org_id)
            ticket.granted.set_result(True)

    def _precedence(self, org_id: str) -> tuple[int, int, int]:
        """The organization with calls waiting whose turn it is next has the least."""
        return (self._running.get(org_id, 0), self._served.get(org_id, -1), self._waiting[org_id][0].order)

    def _forget(self, org_id: str, ticket: _Ticket) -> None:
        tickets = self._waiting.get(org_id)
        if tickets is None or ticket not in tickets:
            return
        tickets.remove(ticket)
        if not tickets:
            del self._waiting[org_id]
            self._forget_if_idle(org_id)

    def _forget_if_idle(self, org_id: str) -> None:
        """Keep when an organization was last served only while it has calls running or waiting."""
        if org_id not in self._running and org_id not in self._waiting:
            self._served.pop(org_id, None)
