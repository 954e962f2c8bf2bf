"""``nightshift sleeptime run``, ``batch list --kind`` and ``batch costs`` against a real server.

The module's server (``tests/e2e/conftest.py``, the provider emulator behind it, its poller on)
serves the commands, run with typer's CliRunner in the test's own organization. The commands only
speak HTTP, so on SQLite only; the API's figures are checked on both databases elsewhere.
"""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner, Result

from nightshift.cli import app

MODEL = "anthropic/claude-3-5-haiku-20241022"
WATCH = ("--interval", "0.05", "--timeout", "60")

runner = CliRunner()


def cli(server: str, *args: str) -> Result:
    return runner.invoke(app, [*args, "--server", server])


def test_nothing_due_then_every_sleeptime_agent_run_listed_and_costed_apart(server: str, http: httpx.Client) -> None:
    main = http.post("/v1/agents/", json={"name": "pal", "model": MODEL, "enable_sleeptime": True})
    main_id = main.raise_for_status().json()["id"]
    nothing = cli(server, "sleeptime", "run")
    assert nothing.exit_code == 0, nothing.output
    assert nothing.stdout == "" and "nothing due" in nothing.stderr

    turn = http.post("/v1/messages/batches", json={"requests": [{"agent_id": main_id, "input": "I like plums."}]})
    main_run = turn.raise_for_status().json()["id"]
    assert cli(server, "batch", "watch", main_run, *WATCH).exit_code == 0
    # One turn is not enough to make it due, but --all takes every agent with anything new.
    assert "nothing due" in cli(server, "sleeptime", "run").stderr
    ran = cli(server, "sleeptime", "run", "--all", "--watch", *WATCH)

    (sleeptime_run,) = [line for line in ran.stdout.splitlines() if line.startswith("batch-")]
    assert "queued 1 sleep-time run" in ran.stderr, ran.output
    assert "│ agents           │ 1 (1 finished)" in ran.stdout, ran.stdout
    assert f"{sleeptime_run} (sleeptime): " in ran.stderr  # the watch's progress lines
    assert "│ kind             │ sleeptime" in ran.stdout, ran.stdout
    run = http.get(f"/v1/messages/batches/{sleeptime_run}").json()
    assert run["kind"] == "sleeptime"
    assert run["status"] == "completed" and ran.exit_code == 0, ran.output
    assert "nothing due" in cli(server, "sleeptime", "run", "--all").stderr  # nothing new since

    listed = cli(server, "batch", "list", "--kind", "sleeptime")
    assert listed.exit_code == 0, listed.output
    (row,) = [line for line in listed.stdout.splitlines() if "batch-" in line]
    assert row.split("│")[1].strip() == sleeptime_run and row.split("│")[-2].strip() == "sleeptime", row
    every = cli(server, "batch", "list").stdout
    assert main_run in every and sleeptime_run in every
    (main_row,) = [line for line in every.splitlines() if main_run in line]
    assert main_row.split("│")[-2].strip() == "main", main_row
    assert "of kind main" not in cli(server, "batch", "list", "--kind", "main").stderr

    costs = cli(server, "batch", "costs")
    assert costs.exit_code == 0, costs.output
    as_json = json.loads(cli(server, "batch", "costs", "--json").stdout)
    assert [k["kind"] for k in as_json["kinds"]] == ["main", "sleeptime"]
    for kind in as_json["kinds"]:
        assert kind["runs"] == 1 and kind["agents"] == 1, kind
        (shown,) = [line for line in costs.stdout.splitlines() if f" {kind['kind']} " in line]
        cells = [cell.strip() for cell in shown.split("│")]
        assert cells[1:5] == [kind["kind"], "1", "1", str(kind["requests"])], shown


def test_sleeptime_run_needs_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    result = runner.invoke(app, ["sleeptime", "run", "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "nightshift serve" in result.stderr
