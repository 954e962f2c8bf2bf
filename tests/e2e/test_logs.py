"""``nightshift serve`` with JSON logs: every line is JSON, each batch stage logs a line with its
fields, and neither the server password, an agent's secret nor a user's message is ever written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from nightshift.emulator import EmulatorAdmin
from support.api import json_object
from support.processes import Servers, server_environment
from support.runs import ANTHROPIC_MODEL, Runs

PASSWORD = "correct-horse-battery-staple-9f2c"
AGENT_SECRET = "tok-live-4b1d77e0c3a9"
MESSAGE = "my tax number is 8675309-zebra, keep it quiet"
AGENTS = 2


async def test_json_logs_carry_the_stages_and_no_secret(
    db_url: str, tmp_path: Path, emulator: str, admin: EmulatorAdmin
) -> None:
    env = server_environment(
        db_url, tmp_path / "home", NIGHTSHIFT_LOG_FORMAT="json", NIGHTSHIFT_SERVER_PASSWORD=PASSWORD
    )
    servers = Servers(env, tmp_path)
    try:
        server = await servers.start("json-logs")
        headers = {"Authorization": f"Bearer {PASSWORD}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as client:
            runs = Runs(client)
            agents = [
                await runs.agent(f"agent-{i}", model=ANTHROPIC_MODEL, secrets={"SHOP_TOKEN": AGENT_SECRET})
                for i in range(AGENTS)
            ]
            run = await runs.start([{"agent_id": a["id"], "input": MESSAGE} for a in agents])
            assert (await runs.wait(run["id"]))["status"] == "completed"
            # A second run, cancelled while its batch runs at the provider.
            await admin.configure(polls_to_end=1000)
            second = await runs.start([{"agent_id": a["id"], "input": MESSAGE} for a in agents])
            cancelled = json_object(await client.patch(f"/v1/messages/batches/{second['id']}/cancel"))
            assert cancelled["status"] == "cancelled"
            # A query string may hold a user's text: the access line shows the path only.
            assert (await client.get("/v1/agents/", params={"name": MESSAGE})).status_code == 200
    finally:
        servers.stop_all()

    output = server.log_path.read_text()
    lines = [_parsed(line) for line in output.splitlines()]
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
    stages = {line["stage"]: line for line in lines if line.get("run_id") == run["id"]}
    assert set(stages) == {"submit", "poll", "apply"}, stages
    for stage in stages.values():
        assert stage["level"] == "INFO"
        assert stage["agents"] == AGENTS
        assert stage["step"] == stages["submit"]["step"]
        assert stage["provider"] == "anthropic"
        assert stage["provider_batch_id"] and stage["provider_batch_id"] in stage["message"]
        assert isinstance(stage["duration_ms"], int) and stage["duration_ms"] >= 0
    assert any(line["logger"] == "uvicorn.access" and line["path"] == "/v1/agents/" for line in lines)
    [cancel] = [line for line in lines if line.get("run_id") == second["id"] and line.get("stage") == "cancel"]
    assert cancel["agents"] == AGENTS and cancel["provider_batch_id"]
    for secret in (PASSWORD, AGENT_SECRET, MESSAGE, "8675309"):
        assert secret not in output


def _parsed(line: str) -> dict[str, Any]:
    try:
        parsed = json.loads(line)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not a JSON line: {line!r}") from exc
    assert isinstance(parsed, dict), line
    return parsed
