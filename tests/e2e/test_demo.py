"""``nightshift demo``: the first thing a new user runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nightshift.cli import app
from nightshift.demo import SLEEPTIME_TURNS

runner = CliRunner()


def test_demo_runs_a_multi_step_batch_to_completion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_HOME", str(tmp_path))
    # The user's server database: the demo must leave it alone.
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", f"sqlite:///{tmp_path / 'server.db'}")
    result = runner.invoke(app, ["demo", "--agents", "6"])
    assert result.exit_code == 0, result.output
    output = result.output
    assert "created 6 agents" in output
    assert ": completed" in output
    assert "agents finished / failed" in output and "6 / 0" in output
    # Three steps, counted from 1 as everywhere people read them (the API's last step is 2).
    assert "steps (provider batches)          │ 3 (3)" in output
    # The three steps: the custom tool, the memory edit, the final message.
    assert "roll_dice(" in output and "core_memory_append(" in output and "send_message(" in output
    assert "same work without batch" in output
    demo_db = tmp_path / "demo.db"
    assert demo_db.exists() and not (tmp_path / "server.db").exists()
    assert f"  NIGHTSHIFT_DATABASE_URL=sqlite:///{demo_db} nightshift serve\n" in output
    # Then the sleep-time part: one sleep-time run keeps what each user said in the shared memory.
    assert "(kind sleeptime), one for all five" in output
    assert "what the sleep-time run completed changed in their shared memory" in output
    for said in ("My name is Ada and I work at the observatory.", "I prefer tea to coffee."):
        assert said in output

    # Each demo starts afresh: its database holds this run's agents only.
    again = runner.invoke(app, ["demo", "--agents", "3"])
    assert again.exit_code == 0, again.output
    assert _agents_in(demo_db) == 3 + 2 * len(SLEEPTIME_TURNS)  # and the five pairs of the sleep-time part


def _agents_in(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM agents").fetchone()
    return int(count)


def test_demo_against_a_real_provider_needs_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_HOME", str(tmp_path))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["demo", "--provider", "openai"])
    assert result.exit_code == 1
    assert "OPENAI_API_KEY is not set" in result.output
    unknown = runner.invoke(app, ["demo", "--provider", "mistral"])
    assert unknown.exit_code == 2
    assert "unknown provider" in unknown.output
