"""The CLI's lists as a script or a narrow terminal reads them, and a run's name and metadata.

Every list command prints each id whole on one line, whatever the width (``COLUMNS=60``, or a pipe
without COLUMNS), so that it can be copied into the next command; ``--json`` prints the list as one
JSON array. ``batch submit --name/--metadata/--metadata-json`` set the run's metadata. The commands
run through typer's CliRunner (whose output is not a terminal, as a pipe) against the module's
server, the emulator behind it; they only speak HTTP, so on SQLite only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from nightshift.cli import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# Long names with no space to break at: they compete with the ids for the width.
NAMES = ("a-rather-long-agent-name-for-a-narrow-terminal-one", "a-rather-long-agent-name-for-a-narrow-terminal-two")
WATCH = ("--interval", "0.05", "--timeout", "60")

runner = CliRunner()


def cli(server: str, *args: str, columns: int | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> Result:
    if columns is not None:
        assert monkeypatch is not None
        monkeypatch.setenv("COLUMNS", str(columns))
    result = runner.invoke(app, [*args, "--server", server])
    if monkeypatch is not None:
        monkeypatch.delenv("COLUMNS", raising=False)
    assert result.exit_code == 0, result.output
    return result


def assert_whole(output: str, ids: list[str]) -> None:
    """Each id on one line of ``output``, whole."""
    lines = output.splitlines()
    for shown in ids:
        assert any(shown in line for line in lines), f"{shown} is not whole on one line:\n{output}"


def agents(http: httpx.Client) -> list[str]:
    ids = []
    for name in NAMES:
        created = http.post("/v1/agents/", json={"name": name, "model": "anthropic/claude-3-5-haiku-20241022"})
        ids.append(created.raise_for_status().json()["id"])
    return ids


@pytest.mark.parametrize("columns", [60, None], ids=["narrow", "pipe"])
def test_agents_list_keeps_ids_whole(
    server: str, http: httpx.Client, columns: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = agents(http)

    listed = cli(server, "agents", "list", columns=columns, monkeypatch=monkeypatch)

    assert_whole(listed.stdout, ids)
    as_json = json.loads(cli(server, "agents", "list", "--json").stdout)
    assert [a["id"] for a in as_json] == ids
    assert [a["name"] for a in as_json] == list(NAMES)


def test_submit_with_a_name_and_metadata_then_list_the_runs(
    tmp_path: Path, server: str, http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = agents(http)
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"agent_id": i, "input": "Hello there."}) + "\n" for i in ids))

    submitted = cli(
        server,
        "batch",
        "submit",
        str(requests),
        "--name",
        "nightly digest",
        "--metadata",
        "team=search",
        "--metadata",
        "ticket=OPS-1=2",
        "--metadata-json",
        '{"attempt": 2, "team": "ignored: --metadata comes after"}',
        "--watch",
        *WATCH,
    )
    run_id = submitted.stdout.splitlines()[0]
    unnamed = cli(server, "batch", "submit", str(requests), "--watch", *WATCH).stdout.splitlines()[0]

    run: dict[str, Any] = http.get(f"/v1/messages/batches/{run_id}").json()
    assert run["metadata"] == {"name": "nightly digest", "team": "search", "ticket": "OPS-1=2", "attempt": 2}
    assert "│ name " in next(line for line in submitted.stdout.splitlines() if "nightly digest" in line)
    for columns in (60, None):
        listed = cli(server, "batch", "list", columns=columns, monkeypatch=monkeypatch).stdout
        assert_whole(listed, [run_id, unnamed])
        assert "name" in listed.splitlines()[1]  # the header of the name column
        assert "nightly" in next(line for line in listed.splitlines() if run_id in line)
    as_json = json.loads(cli(server, "batch", "list", "--json").stdout)
    assert [r["id"] for r in as_json] == [unnamed, run_id]  # newest first
    assert as_json[1]["metadata"]["name"] == "nightly digest"

    messages = cli(server, "batch", "messages", run_id, columns=60, monkeypatch=monkeypatch).stdout
    assert_whole(messages, list(NAMES))
    listed_messages = json.loads(cli(server, "batch", "messages", run_id, "--json").stdout)
    assert {m["agent_id"] for m in listed_messages} == set(ids)
    assert all(m["id"] for m in listed_messages)


def test_runs_without_names_have_no_name_column(server: str, http: httpx.Client) -> None:
    assert json.loads(cli(server, "batch", "list", "--json").stdout) == []  # an empty list, still JSON
    (agent_id, _) = agents(http)
    started = http.post("/v1/messages/batches", json={"requests": [{"agent_id": agent_id, "input": "Hi."}]})
    run_id = started.raise_for_status().json()["id"]

    listed = cli(server, "batch", "list").stdout

    assert run_id in listed
    assert "name" not in listed.splitlines()[1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--metadata", "team"], "--metadata 'team': expected KEY=VALUE (e.g. --metadata team=search)"),
        (["--metadata", "=x"], "--metadata '=x': expected KEY=VALUE (e.g. --metadata team=search)"),
        (["--metadata-json", "[1]"], "--metadata-json must be a JSON object ({...}), got list"),
        (["--metadata-json", "{nope"], "--metadata-json is not valid JSON: "),
    ],
)
def test_bad_metadata_is_refused_before_anything_is_submitted(
    tmp_path: Path, server: str, http: httpx.Client, options: list[str], message: str
) -> None:
    (agent_id, _) = agents(http)
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"agent_id": agent_id, "input": "Hi."}) + "\n")

    refused = runner.invoke(app, ["batch", "submit", str(requests), *options, "--server", server])

    assert refused.exit_code == 1
    assert refused.stderr.startswith(message)
    assert len(refused.stderr.splitlines()) == 1
    assert http.get("/v1/messages/batches").json() == []
