"""The prompt-cache breakpoints of a step's requests (``domain/caching.py``): what the agents of the
step share is counted across their requests, what each agent will read back from its own window."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Final

from nightshift.domain.batches import StepState
from nightshift.domain.caching import CachePolicy, Task, plan
from nightshift.domain.polling import Turnaround
from nightshift.providers.base import ModelRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheTiming:
    """The policy, and when the requests of a step are answered: ``next_request_in`` is the time
    from one request of an agent to its next (a batch's turnaround; next to nothing for a call),
    ``spread`` how long the step's requests take to be processed (a batch's turnaround)."""

    policy: CachePolicy = CachePolicy.AUTO
    next_request_in: timedelta = timedelta(0)
    spread: timedelta = timedelta(0)


# A call through the normal API: the agent's next request follows within seconds.
IN_CALL: Final = CacheTiming()
# A provider's batch turnaround until enough of its batches were seen to end (Anthropic: most
# batches end within the hour).
UNSEEN_TURNAROUND: Final = timedelta(minutes=30)


def in_batch(policy: CachePolicy, turnaround: Turnaround | None) -> CacheTiming:
    """The timing of a batch step: its requests are processed over the provider's usual (median)
    turnaround, and an agent's next request comes a turnaround later."""
    usual = turnaround.p50 if turnaround is not None else UNSEEN_TURNAROUND
    return CacheTiming(policy=policy, next_request_in=usual, spread=usual)


def with_cache_plans(
    requests: Mapping[str, ModelRequest], states: Mapping[str, StepState], timing: CacheTiming
) -> dict[str, ModelRequest]:
    """Each agent's request with the breakpoints ``timing.policy`` gives it (keyed as ``requests``)."""
    tools_of = {agent_id: tuple(t["name"] for t in r.tools) for agent_id, r in requests.items()}
    tools_sharers = Counter(tools_of.values())
    system_sharers = Counter((tools_of[agent_id], r.system) for agent_id, r in requests.items())
    planned: dict[str, ModelRequest] = {}
    for agent_id, request in requests.items():
        state = states[agent_id]
        cache = plan(
            timing.policy,
            Task.of(request.messages, step_number=state.step_number, max_steps=state.max_steps),
            next_request_in=timing.next_request_in,
            spread=timing.spread,
            tools_sharers=tools_sharers[tools_of[agent_id]],
            system_sharers=system_sharers[(tools_of[agent_id], request.system)],
        )
        planned[agent_id] = replace(request, cache=cache)
    return planned
