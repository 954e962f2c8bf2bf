"""``nightshift demo``: the first thing a new user runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nightshift.cli import app
from nightshift.demo import SLEEPTIME_USERS

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

    # The sleep-time part: two turns, then one sleep-time run keeps each user's facts in the
    # human block of their own agent (rich may wrap a cell, so look at the table row by row).
    assert "turn 1:" in output and "turn 2:" in output
    assert "sleep-time run: 2 steps, cost $" in output and "without batch $" in output
    table = output[output.index("memory kept by sleep-time run") :]
    assert "completed" in table.split("┏", 1)[0]  # the title, however it wraps
    rows = _rows_by_agent(table)
    assert set(rows) == {f"demo-pal-of-{name.lower()}" for name, _, _ in SLEEPTIME_USERS}
    assert "The user's name is Ada" in rows["demo-pal-of-ada"] and "The user lives in Lyon" in rows["demo-pal-of-ada"]
    assert "The user's name is Basil" in rows["demo-pal-of-basil"]
    assert "The user works as a nurse" in rows["demo-pal-of-basil"]
    for name, _, _ in SLEEPTIME_USERS:
        own = rows[f"demo-pal-of-{name.lower()}"]
        assert f"name is {name}" in own
        assert not [other for other, _, _ in SLEEPTIME_USERS if other != name and f"name is {other}" in own]

    # Each demo starts afresh: its database holds this run's agents only. This one's run on Gemini
    # (through the emulator), at Gemini's batch prices.
    again = runner.invoke(app, ["demo", "--agents", "3", "--provider", "gemini"])
    assert again.exit_code == 0, again.output
    assert "model:    google_ai/gemini-2.5-flash" in again.output
    assert "agents finished / failed" in again.output and "3 / 0" in again.output
    assert "sleep-time run: 2 steps, cost $" in again.output
    # (its three, and the sleep-time part's main agents with their sleep-time agents)
    assert _agents_in(demo_db) == 3 + 2 * len(SLEEPTIME_USERS)


def _rows_by_agent(table: str) -> dict[str, str]:
    """A rich table's text by the agent named in its first column: a row's wrapped lines joined."""
    rows: dict[str, str] = {}
    current = None
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) < 3 or line.lstrip().startswith(("┃", "┏", "┡", "└")):
            continue
        current = cells[0] or current
        if current is not None:
            rows[current] = " ".join(filter(None, (rows.get(current, ""), *cells[1:])))
    return rows


def _agents_in(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM agents").fetchone()
    return int(count)


def test_demo_against_a_real_provider_needs_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_HOME", str(tmp_path))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["demo", "--provider", "openai", "--real"])
    assert result.exit_code == 1
    assert "OPENAI_API_KEY is not set" in result.output
    unknown = runner.invoke(app, ["demo", "--provider", "mistral"])
    assert unknown.exit_code == 2
    assert "unknown provider" in unknown.output
