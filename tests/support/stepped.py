"""Batch runs stepped by explicit worker passes, over a scripted provider: no poller, no sleeps.

A test starts a run through the API, then ``finish`` calls the worker's ``run_once`` until the run
is no longer created or running, failing after a bounded number of passes; "nothing happened" is
asserted after a pass (``step``), never after a sleep.
"""

from __future__ import annotations

from typing import Any

import httpx

from nightshift.batch.worker import Worker
from support.api import json_object
from support.runs import Runs
from support.scripted import ScriptedModel, call, say

# Passes a run may take before ``finish`` gives up: a step is submitted by one pass (or by the
# request that started it) and polled, applied and followed by the next in the following one.
MAX_PASSES = 200


class SteppedRuns(Runs):
    """``Runs`` whose batches move only when the test makes a worker pass."""

    def __init__(self, client: httpx.AsyncClient, worker: Worker, model: ScriptedModel) -> None:
        super().__init__(client, worker=worker)
        self.worker: Worker = worker
        self.model = model
        self.passes = 0

    async def step(self) -> int:
        """One worker pass (the queued runs started, then the due provider batches); returns how
        many runs and provider batches it handled."""
        self.passes += 1
        return await self.worker.start_queued_runs() + await self.worker.run_once()

    async def run(self, run_id: str) -> dict[str, Any]:
        """The run as the API shows it now."""
        return json_object(await self.client.get(f"/v1/messages/batches/{run_id}"))

    async def finish(self, run_id: str, *, max_passes: int = MAX_PASSES) -> dict[str, Any]:
        """Make worker passes until the run is no longer created or running; returns it then."""
        for _ in range(max_passes):
            run = await self.run(run_id)
            if run["status"] not in ("created", "running"):
                return run
            await self.step()
        run = await self.run(run_id)
        assert run["status"] not in ("created", "running"), f"run still {run['status']} after {max_passes} passes"
        return run


async def mixed_run(runs: SteppedRuns) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A run of three agents, finished: one failed at its request, one took two steps, one took one.

    Returns the run, then the failed, the two-step and the one-step agent.
    """
    bad = await runs.agent("bad")
    two_steps = await runs.agent("two-steps")
    one_step = await runs.agent("one-step")
    runs.model.fail(bad["id"], kind="invalid_request_error")
    runs.model.script(two_steps["id"], call("conversation_search", heartbeat=True, query="hi"), say("done"))
    runs.model.script(one_step["id"], say("hello"))
    run = await runs.start([{"agent_id": a["id"], "input": "hello"} for a in (bad, two_steps, one_step)])
    done = await runs.finish(run["id"])
    assert done["status"] == "completed", done
    return done, bad, two_steps, one_step
