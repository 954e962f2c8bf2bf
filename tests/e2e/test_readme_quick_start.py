"""The README's quick start, run as a new user runs it: its Python blocks, as written, against a
server and the emulator.

Steps 2 (agents with letta-client) and 3 (a batch run with ``nightshift.client``) are taken from
README.md itself, so a quick start that stops working, or drifts from the client, fails here.
The only change made to them is the server's address, which is a free port here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.serving import running_server

README = Path(__file__).parents[2] / "README.md"
DEFAULT_SERVER = "http://127.0.0.1:8283"


def quick_start_blocks() -> list[str]:
    """The Python blocks of the README's "Quick start" section, in order."""
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture
def server(tmp_path: Path, db_url: str, emulator: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A server without a password, as the quick start's ``nightshift serve`` is."""
    settings = Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05)
    with running_server(create_app(settings)) as url:
        monkeypatch.setenv("NIGHTSHIFT_SERVER", url)
        monkeypatch.delenv("NIGHTSHIFT_API_KEY", raising=False)
        yield url


def test_the_quick_start_runs_as_written(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = quick_start_blocks()
    assert len(blocks) == 2, "the quick start's Python: agents with letta-client, then a batch run"
    names: dict[str, Any] = {}
    try:
        for block in blocks:
            exec(compile(block.replace(DEFAULT_SERVER, server), str(README), "exec"), names)
    finally:
        # The README leaves its two clients open, as a script that ends may; a test closes them.
        for client in ("letta", "ns"):
            if client in names:
                names[client].close()

    assert names["run"].status == "completed", names["run"]
    printed = capsys.readouterr().out.splitlines()
    results = [line for line in printed if line.startswith("guest-")]
    assert len(results) == len(names["agents"]) == 3, printed
    # Each agent answered the "hello" in text (a letta_v1 agent's reply) at a cost.
    for line in results:
        _name, state, *reply, cost = line.split(" ")
        assert state == "finished", line
        assert reply and reply != ["None"], line
        assert cost.startswith("$") and float(cost[1:]) > 0, line
