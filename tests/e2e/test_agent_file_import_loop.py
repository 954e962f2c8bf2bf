"""Importing a large Agent File through a real ``serve`` leaves its event loop free: a health check
sent all along answers promptly, and the import still creates the agent with its messages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.agent_files import SUPPORT_DESK, document, double_encoded
from support.processes import Servers, server_environment

# Just under the default request limit (32 MB), the largest file an import takes.
FILE_BYTES = 30_000_000
# The issue asks for health answers within 100 ms; a loaded two-core machine (the import's thread,
# the database and other test runs all want the cores) adds scheduling delays of its own, so the
# test allows more. A file parsed or stored on the loop holds it for seconds, far past this.
SLOWEST_HEALTH_SECONDS = 0.5
PROBE_EVERY_SECONDS = 0.02


@pytest.fixture
def servers(db_url: str, tmp_path: Path) -> Iterator[Servers]:
    group = Servers(server_environment(db_url, tmp_path / "home"), tmp_path)
    yield group
    group.stop_all()


@pytest.fixture(scope="module")
def large_agent_file() -> tuple[bytes, int]:
    """An Agent File of about ``FILE_BYTES``, double-encoded as Letta publishes them: the support
    desk's first agent with many more user messages (outside its in-context window), and how many
    messages its agent holds."""
    doc: dict[str, Any] = document(SUPPORT_DESK)
    doc["agents"] = doc["agents"][:1]
    agent = doc["agents"][0]
    used = set(agent["block_ids"])
    doc["blocks"] = [b for b in doc["blocks"] if b["id"] in used]
    spare = next(m for m in agent["messages"] if m["role"] == "user")
    one = len(double_encoded({**spare, "id": "message-extra-0000000"})) + 4  # with its ", " written twice
    count = int(FILE_BYTES * 0.99 - len(double_encoded(doc))) // one
    # The copies share the spare's nested values: only the id differs, and the file is text.
    agent["messages"] += [{**spare, "id": f"message-extra-{index}"} for index in range(count)]
    return double_encoded(doc), len(agent["messages"])


async def _probe(http: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
    """Ask for /v1/health until ``stop`` is set; each answer's round trip, in seconds."""
    times: list[float] = []
    while not stop.is_set():
        started = time.perf_counter()
        response = await http.get("/v1/health")
        times.append(time.perf_counter() - started)
        assert response.status_code == 200
        try:
            await asyncio.wait_for(stop.wait(), PROBE_EVERY_SECONDS)
        except TimeoutError:
            pass
    return times


@pytest.mark.slow
async def test_a_large_import_leaves_the_loop_free(servers: Servers, large_agent_file: tuple[bytes, int]) -> None:
    content, messages = large_agent_file
    assert len(content) <= FILE_BYTES
    server = await servers.start("api")
    async with (
        httpx.AsyncClient(base_url=server.base_url, timeout=300) as client,
        httpx.AsyncClient(base_url=server.base_url, timeout=30) as prober,
    ):
        # The probe's first request, which opens its connection, is made before the import, untimed.
        assert (await prober.get("/v1/health")).status_code == 200
        stop = asyncio.Event()
        probe = asyncio.create_task(_probe(prober, stop))
        try:
            started = time.perf_counter()
            response = await client.post("/v1/agents/import", files={"file": ("big.af", content)})
            took = time.perf_counter() - started
        finally:
            stop.set()
        times = await probe
        assert response.status_code == 200, response.text
        (agent_id,) = response.json()["agent_ids"]
        # The import took long enough for the probe to see it, and the loop answered all along.
        assert len(times) >= 5, (took, times)
        assert max(times) < SLOWEST_HEALTH_SECONDS, f"import {took:.1f} s, slowest health {sorted(times)[-10:]}"
        listed = await client.get(f"/v1/agents/{agent_id}/messages", params={"limit": 1})
        assert listed.status_code == 200
        assert (await client.get("/v1/agents/")).status_code == 200
    print(f"import of {len(content)} bytes, {messages} messages: {took:.1f} s; slowest health {sorted(times)[-8:]}")
