"""A run whose provider cannot be reached says so at once: in the run's JSON and in ``batch watch``.

The module's server has its provider variables pointing at a closed port (no emulator), so the
first submit of a run fails with a connection refused, and the poller retries it later. What the
server knows of it from the first failure is what a person watching the run must see.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from nightshift.cli import app
from support.ports import closed_port

runner = CliRunner()


@pytest.fixture(scope="module")
def module_emulator() -> Iterator[str]:
    """Instead of the emulator, an address nothing listens on, for every provider of the server."""
    with closed_port() as port, pytest.MonkeyPatch.context() as monkeypatch:
        closed = f"http://127.0.0.1:{port}"
        monkeypatch.setenv("ANTHROPIC_BASE_URL", closed)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{closed}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test")
        yield closed


@pytest.fixture
def api(base_url: str, api_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as client:
        yield client


def _first_error(api: httpx.Client, run_id: str) -> dict[str, Any]:
    """The run, once the server has recorded its first provider error (the poller submits it in the background)."""
    for _ in range(600):
        run: dict[str, Any] = api.get(f"/v1/messages/batches/{run_id}").raise_for_status().json()
        if run["progress"]["last_error"] is not None:
            return run
        time.sleep(0.05)
    raise AssertionError(f"no provider error recorded: {run}")


def test_an_unreachable_provider_shows_in_the_run_and_its_watch(
    api: httpx.Client, base_url: str, api_key: str, module_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = api.post("/v1/agents/", json={"name": "ada", "model": "anthropic/claude-3-5-haiku-20241022"})
    agent_id = agent.raise_for_status().json()["id"]
    started = api.post(
        "/v1/messages/batches",
        json={"requests": [{"agent_id": agent_id, "messages": [{"role": "user", "content": "hi"}]}]},
    )
    run_id = started.raise_for_status().json()["id"]
    assert started.json()["progress"]["last_error"] is None  # nothing tried yet

    run = _first_error(api, run_id)

    reason = f"cannot reach Anthropic at {module_emulator}/v1/messages/batches: connection refused"
    error = run["progress"]["last_error"]
    assert error["error"] == reason
    assert (error["provider"], error["stage"], error["attempts"], error["retrying"]) == ("anthropic", "submit", 1, True)
    assert error["retry_at"] is not None
    assert error["provider_batch_id"] == run["progress"]["provider_batches"][0]["id"]
    assert run["status"] in ("created", "running")
    assert run["progress"]["agents"]["failed"] == 0  # the agent has not failed: the submit is retried

    monkeypatch.setenv("NIGHTSHIFT_API_KEY", api_key)
    watched = runner.invoke(app, ["batch", "watch", run_id, "--timeout", "0", "--server", base_url])

    assert watched.exit_code == 1, watched.output
    progress = next(line for line in watched.stderr.splitlines() if line.startswith(run_id))
    assert "0/1 agents done" in progress
    assert "anthropic error (submit, attempt 1, tried again at " in progress
    assert progress.endswith(f"): {reason}")
