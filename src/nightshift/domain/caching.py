"""Where the prompt cache pays: the lifetime of each cache breakpoint of a request, chosen to make
the agent's task cheapest (``NIGHTSHIFT_CACHE_POLICY=auto``), or one lifetime everywhere.

A provider that bills cache writes (Anthropic) charges, against the plain input price, 1.25x for
a token written with a five-minute lifetime, 2x with one hour, and 0.1x for a read; a read within
the lifetime keeps the entry alive. So a write pays only if it is read back in time: a five-minute
write once one read follows within five minutes, a one-hour write once more than one read follows
within the hour, and a write nobody reads is a loss.

A request has up to three breakpoints, in prompt order: after the tools (the prefix every agent of
the step with the same tools shares), after the system prompt (shared by the agents with the same
tools and system, usually one: the system holds the agent's memory) and after the last message (the
agent's own history, read back by its next request). For each, with

* ``n``: the step's requests that share the prefix, processed over the batch's ``spread``
  (``spread / n`` apart; each read keeps the entry alive for the next);
* ``k``: the requests the agent is expected to make after this one in its task (``Task``);
* ``g``: the time until its next request (a batch step's turnaround; a few seconds in a call),

the expected cost per agent of the prefix's tokens, in plain input prices, is::

    off:          1 + k
    lifetime L:   s(L) + k * (read if g <= L else s(L))
    where s(L) = (write(L) + (n - 1) * (read if spread / n <= L else write(L))) / n

and ``cheapest`` takes the smallest (on a tie: no write, then the shorter lifetime). Anthropic
refuses a one-hour breakpoint after a five-minute one: a plan raises the earlier ones then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Final

from nightshift.domain.messages import Message, MessageKind, Role


class CacheTtl(StrEnum):
    """How long a prompt-cache entry lives; a write costs more the longer (Anthropic's ``ttl``)."""

    FIVE_MINUTES = "5m"  # the API's default lifetime
    ONE_HOUR = "1h"

    @property
    def seconds(self) -> float:
        """The lifetime in seconds."""
        return 300.0 if self is CacheTtl.FIVE_MINUTES else 3600.0


class CachePolicy(StrEnum):
    """``NIGHTSHIFT_CACHE_POLICY``: how the breakpoints' lifetimes are chosen."""

    AUTO = "auto"  # per request and breakpoint, the cheapest for the task (this module's rule)
    ONE_HOUR = "1h"  # every breakpoint written for an hour
    FIVE_MINUTES = "5m"  # every breakpoint written for five minutes
    OFF = "off"  # no breakpoint: nothing written, nothing read


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheRates:
    """What cached tokens cost, as multiples of the plain input price."""

    write_5m: float
    write_1h: float
    read: float

    def write(self, ttl: CacheTtl) -> float:
        """A write with lifetime ``ttl``."""
        return self.write_1h if ttl is CacheTtl.ONE_HOUR else self.write_5m


# Anthropic's, the same for every model it prices.
ANTHROPIC_RATES: Final = CacheRates(write_5m=1.25, write_1h=2.0, read=0.1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outlook:
    """What is expected of a prefix's readers (the module docstring's ``n``, ``k``, ``g``, ``spread``)."""

    later_requests: float = 0.0
    next_request_in: timedelta = timedelta(0)
    sharers: int = 1
    spread: timedelta = timedelta(0)


def prefix_cost(ttl: CacheTtl | None, outlook: Outlook, rates: CacheRates = ANTHROPIC_RATES) -> float:
    """The expected cost per agent of a prefix's tokens written with ``ttl`` (None: not cached),
    in plain input prices, over this request and the agent's later ones."""
    k = outlook.later_requests
    if ttl is None:
        return 1.0 + k
    n = max(outlook.sharers, 1)
    lifetime = ttl.seconds
    shared = rates.read if outlook.spread.total_seconds() / n <= lifetime else rates.write(ttl)
    this_step = (rates.write(ttl) + (n - 1) * shared) / n
    later = rates.read if outlook.next_request_in.total_seconds() <= lifetime else this_step
    return this_step + k * later


def cheapest(outlook: Outlook, rates: CacheRates = ANTHROPIC_RATES) -> CacheTtl | None:
    """The lifetime that makes the prefix cheapest (None: not to cache it)."""
    choices: tuple[CacheTtl | None, ...] = (None, CacheTtl.FIVE_MINUTES, CacheTtl.ONE_HOUR)
    return min(choices, key=lambda ttl: prefix_cost(ttl, outlook, rates))


@dataclass(frozen=True, slots=True, kw_only=True)
class CachePlan:
    """The lifetime of a request's breakpoints, in prompt order (None: no breakpoint there)."""

    tools: CacheTtl | None = None
    system: CacheTtl | None = None
    history: CacheTtl | None = None

    @property
    def marks(self) -> tuple[CacheTtl | None, CacheTtl | None, CacheTtl | None]:
        """The lifetimes in prompt order."""
        return (self.tools, self.system, self.history)

    @classmethod
    def everywhere(cls, ttl: CacheTtl | None) -> CachePlan:
        """Every breakpoint with one lifetime."""
        return cls(tools=ttl, system=ttl, history=ttl)

    @classmethod
    def ordered(cls, tools: CacheTtl | None, system: CacheTtl | None, history: CacheTtl | None) -> CachePlan:
        """These lifetimes, an hour's raised onto the five-minute breakpoints before it (a
        one-hour entry may not follow a five-minute one)."""
        marks = [tools, system, history]
        for i, ttl in enumerate(marks):
            if ttl is CacheTtl.ONE_HOUR:
                marks[:i] = [CacheTtl.ONE_HOUR if m is not None else None for m in marks[:i]]
        return cls(tools=marks[0], system=marks[1], history=marks[2])


NO_CACHE: Final = CachePlan()


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """Where an agent is in its task: the request it makes is its ``step_number``-th (from 0) of
    at most ``max_steps``; ``usual`` is how many it made for an input before (None: unknown)."""

    step_number: int = 0
    max_steps: int = 10
    usual: float | None = None

    @classmethod
    def of(cls, messages: Sequence[Message], *, step_number: int, max_steps: int) -> Task:
        """The task of an agent whose window (the system message left out) is ``messages``."""
        return cls(step_number=step_number, max_steps=max_steps, usual=turns_per_input(messages))

    def later_requests(self, step_number: int | None = None) -> float:
        """How many more requests the agent is expected to make after its ``step_number``-th
        (this one by default): as many as it usually makes; one more once it has run past that;
        with nothing to go by, as many more as it has made (a task that has run long is likely to
        run on). Never more than its steps allow."""
        step = self.step_number if step_number is None else step_number
        made = step + 1
        if self.usual is None:
            expected = float(step)
        elif made < self.usual:
            expected = self.usual - made
        else:
            expected = 1.0 if step >= self.usual else 0.0
        return max(min(expected, float(self.max_steps - made)), 0.0)


# The agents of a step mostly expect the same, and the plan is asked for each of them.
@lru_cache(maxsize=4096)
def plan(
    policy: CachePolicy,
    task: Task,
    *,
    next_request_in: timedelta,
    spread: timedelta = timedelta(0),
    tools_sharers: int = 1,
    system_sharers: int = 1,
    rates: CacheRates = ANTHROPIC_RATES,
) -> CachePlan:
    """The breakpoints of one request under ``policy`` (see the module docstring).

    A mark the agent's previous request of the task made is kept (or lengthened) while its entry
    lives until this request: reading it back costs a tenth of sending it again, whatever comes
    after. The earlier requests' marks are worked out again by the same rule.

    Args:
        policy: The setting.
        task: Where the agent is in its task.
        next_request_in: The time from one request of the agent to its next.
        spread: How long the step's requests take to be processed (a batch's turnaround).
        tools_sharers: The step's requests with the same tools.
        system_sharers: The step's requests with the same tools and system prompt.
        rates: The provider's cache prices.
    """
    if policy is CachePolicy.OFF:
        return NO_CACHE
    if policy is not CachePolicy.AUTO:
        return CachePlan.everywhere(CacheTtl(policy.value))
    chosen = NO_CACHE
    for step in range(task.step_number + 1):
        k = task.later_requests(step)
        now = [
            cheapest(Outlook(later_requests=k, next_request_in=next_request_in, sharers=n, spread=spread), rates)
            for n in (tools_sharers, system_sharers, 1)
        ]
        chosen = CachePlan.ordered(*(_kept(c, b, next_request_in) for c, b in zip(now, chosen.marks, strict=True)))
    return chosen


def _kept(chosen: CacheTtl | None, before: CacheTtl | None, gap: timedelta) -> CacheTtl | None:
    """``chosen``, or the longer ``before`` where the entry it wrote is still there."""
    if before is None or gap.total_seconds() > before.seconds:
        return chosen
    return before if chosen is None or before.seconds > chosen.seconds else chosen


def turns_per_input(messages: Sequence[Message]) -> float | None:
    """The model turns per user input of the agent's earlier tasks in ``messages`` (None: none).

    A task is the user's input (one message or several in a row) and the model's turns up to the
    next input; the last task, still under way, is left out. Events (heartbeats, summaries...)
    are neither inputs nor turns.
    """
    turns: list[int] = []
    current: int | None = None  # the turns of the task under way; None before the first input
    for message in messages:
        if message.role is Role.USER and message.kind is MessageKind.PLAIN:
            if current:  # the task before had turns: it is done (an input right after one joins it)
                turns.append(current)
            current = 0
        elif message.role is Role.ASSISTANT and current is not None:
            current += 1
    return sum(turns) / len(turns) if turns else None
