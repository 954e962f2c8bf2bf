"""Helpers for batch-run tests: drive agents and runs through the HTTP API."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from nightshift.batch.worker import Worker
from support.api import json_list, json_object

ANTHROPIC_MODEL = "anthropic/claude-3-5-haiku-20241022"
OPENAI_MODEL = "openai/gpt-4o-mini"
GEMINI_MODEL = "google_ai/gemini-2.5-flash"

LOOKUP_TOOL = '''
def lookup_order(order_id: str) -> str:
    """Look up the status of an order.

    Args:
        order_id: The order's identifier.
    """
    return f"order {order_id} shipped"
'''


class Runs:
    """Drive agents and batch runs through the HTTP API."""

    def __init__(self, client: httpx.AsyncClient, *, worker: Worker | None = None) -> None:
        self.client = client
        # An app without a poller (the test drives the worker): ``start`` starts its runs with it.
        self.worker = worker

    async def agent(self, name: str, model: str = ANTHROPIC_MODEL, **extra: Any) -> dict[str, Any]:
        """A new agent; a memgpt one (heartbeats, send_message) unless ``extra`` names another type."""
        body = {
            "name": name,
            "model": model,
            "agent_type": "memgpt_v2_agent",
            "memory_blocks": [
                {"label": "persona", "value": f"I am {name}.", "limit": 500},
                {"label": "human", "value": "Nothing known yet.", "limit": 500},
            ],
            **extra,
        }
        return json_object(await self.client.post("/v1/agents/", json=body))

    async def start(self, requests: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """Create a run and wait until its first step is submitted (see ``started``)."""
        run = json_object(await self.client.post("/v1/messages/batches", json={"requests": requests, **extra}))
        if self.worker is not None:
            await self.worker.start_queued_runs()  # what the poller's next pass would do
        return await self.started(run["id"])

    async def started(self, run_id: str, *, timeout: float = 60) -> dict[str, Any]:
        """The run once a poller has written its first step and submitted it (or its submission
        failed once), or once it has ended: the POST answers with the run queued, before that."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            run = json_object(await self.client.get(f"/v1/messages/batches/{run_id}"))
            batches = run["progress"]["provider_batches"]
            if run["status"] not in ("created", "running"):
                return run
            if batches and all(b["status"] != "created" or b["error"] for b in batches):
                return run
            assert asyncio.get_running_loop().time() < deadline, f"run still not submitted: {run['progress']}"
            await asyncio.sleep(0.02)

    async def wait(self, run_id: str, *, timeout: float = 30) -> dict[str, Any]:
        """Poll the run until it is no longer created or running."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            run = json_object(await self.client.get(f"/v1/messages/batches/{run_id}"))
            if run["status"] not in ("created", "running"):
                return run
            assert asyncio.get_running_loop().time() < deadline, f"run still {run['status']}: {run['progress']}"
            await asyncio.sleep(0.05)

    async def messages(self, run_id: str, **params: Any) -> list[dict[str, Any]]:
        """Every message of the run, oldest first, following the pages."""
        found: list[dict[str, Any]] = []
        after = None
        while True:
            query = {"order": "asc", "limit": 50, **params, **({"after": after} if after else {})}
            page = (await self.client.get(f"/v1/messages/batches/{run_id}/messages", params=query)).json()["messages"]
            if not page:
                return found
            found.extend(page)
            after = page[-1]["id"]

    async def context(self, agent_id: str) -> list[dict[str, Any]]:
        """The agent's stored messages, oldest first (Letta shapes)."""
        return json_list(
            await self.client.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 1000})
        )
