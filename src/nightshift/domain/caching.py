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
* ``k``: the requests the agent is expected to make after this one in the task (``later_requests``);
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


# The agents of a step mostly expect the same, and the plan is asked for each of them.
@lru_cache(maxsize=4096)
def plan(
    policy: CachePolicy,
    *,
    later_requests: float,
    next_request_in: timedelta,
    spread: timedelta = timedelta(0),
    tools_sharers: int = 1,
    system_sharers: int = 1,
    rates: CacheRates = ANTHROPIC_RATES,
) -> CachePlan:
    """The breakpoints of one request under ``policy`` (see the module docstring).

    Args:
        policy: The setting.
        later_requests: The requests the agent is expected to make after this one in its task.
        next_request_in: The time until its next request.
        spread: How long the step's requests take to be processed (a batch's turnaround).
        tools_sharers: The step's requests with the same tools.
        system_sharers: The step's requests with the same tools and system prompt.
        rates: The provider's cache prices.
    """
    if policy is CachePolicy.OFF:
        return NO_CACHE
    if policy is not CachePolicy.AUTO:
        return CachePlan.everywhere(CacheTtl(policy.value))

    def choose(sharers: int) -> CacheTtl | None:
        outlook = Outlook(
            later_requests=later_requests, next_request_in=next_request_in, sharers=sharers, spread=spread
        )
        return cheapest(outlook, rates)

    return CachePlan.ordered(choose(tools_sharers), choose(system_sharers), choose(1))


def later_requests(messages: Sequence[Message], *, step_number: int, max_steps: int) -> float:
    """How many more requests the agent is expected to make in its task after this one.

    ``messages`` is its window (the system message left out), ending in the task so far:
    ``step_number`` requests of this task were answered already. The agent's earlier tasks in the
    window say how many requests it usually makes for one input (its model turns per input), and
    it is expected to make as many; one more once it has run past that, and with no earlier task to
    go by, as many more as it has made (a task that has run long is likely to run on). Never more
    than its steps allow.
    """
    usual = turns_per_input(messages)
    made = step_number + 1
    if usual is None:
        expected = float(step_number)
    elif made < usual:
        expected = usual - made
    else:
        expected = 1.0 if step_number >= usual else 0.0
    return max(min(expected, float(max_steps - made)), 0.0)


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
            if current:
                turns.append(current)
                current = 0
            elif current is None:
                current = 0
        elif message.role is Role.ASSISTANT and current is not None:
            current += 1
    return sum(turns) / len(turns) if turns else None
