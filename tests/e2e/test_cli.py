"""The ``nightshift`` command: db upgrade, keys create, and serve as a real process."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from nightshift.cli import app
from nightshift.serving import free_port

runner = CliRunner()


@pytest.fixture(autouse=True)
def _restored_logging() -> Iterator[None]:
    """``poll`` configures the process's logging: put the test run's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "db", "keys", "emulator", "demo"):
        assert command in result.output


def test_db_upgrade_creates_the_default_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NIGHTSHIFT_DATABASE_URL", raising=False)
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "nightshift.db").exists()


def test_db_upgrade_rejects_an_unknown_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", "mysql://root@localhost/x")
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code != 0
    assert "unsupported database" in str(result.exception) or "unsupported database" in result.output


@pytest.mark.parametrize("fault", ["missing database", "closed port"])
@pytest.mark.parametrize("command", [["db", "upgrade"], ["keys", "create"], ["poll", "--once"], ["demo"]])
def test_a_database_out_of_reach_is_one_line(
    command: list[str], fault: str, monkeypatch: pytest.MonkeyPatch, refused_port: int
) -> None:
    if fault == "missing database":
        url = "postgresql://postgres@127.0.0.1:5432/nightshift_never_created"
        expected = (
            "error: the database 'nightshift_never_created' does not exist on PostgreSQL at 127.0.0.1:5432: "
            "create it with `createdb -h 127.0.0.1 -p 5432 -U postgres nightshift_never_created`, then run this again"
        )
    else:
        url = f"postgresql://postgres@127.0.0.1:{refused_port}/test"
        expected = "error: cannot connect to PostgreSQL at 127.0.0.1:"
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", url)
    result = runner.invoke(app, [*command, *(["--database-url", url] if command == ["demo"] else [])])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1, result.output  # one line, no traceback
    assert result.output.startswith(expected), result.output


def test_serve_with_a_database_out_of_reach_says_so_in_one_line(tmp_path: Path) -> None:
    url = "postgresql://postgres@127.0.0.1:5432/nightshift_never_created"
    process = _serve(tmp_path, url, free_port())
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    lines = output.decode().strip().splitlines()
    assert len(lines) == 1 and "createdb -h 127.0.0.1 -p 5432 -U postgres nightshift_never_created" in lines[0]


def _serve(tmp_path: Path, db_url: str, port: int, **env: str) -> subprocess.Popen[bytes]:
    environment = {
        **os.environ,
        "NIGHTSHIFT_HOME": str(tmp_path / "home"),
        "NIGHTSHIFT_DATABASE_URL": db_url,
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "nightshift", "serve", "--port", str(port)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _wait_healthy(base: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        try:
            if httpx.get(f"{base}/v1/health").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("server did not become healthy")


def test_serve_with_password_and_api_keys(tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", db_url)
    created = runner.invoke(app, ["keys", "create", "--org", "acme"])
    assert created.exit_code == 0, created.output
    key = created.output.strip().splitlines()[-1]
    assert key.startswith("ns-")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = _serve(tmp_path, db_url, port, NIGHTSHIFT_SERVER_PASSWORD="hunter2")
    try:
        _wait_healthy(base, process)
        assert httpx.get(f"{base}/v1/agents/").status_code == 401
        assert httpx.get(f"{base}/v1/agents/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert httpx.get(f"{base}/v1/agents/", headers={"Authorization": "Bearer hunter2"}).status_code == 200
        as_acme = {"Authorization": f"Bearer {key}"}
        made = httpx.post(
            f"{base}/v1/agents/", headers=as_acme, json={"name": "a", "model": "openai/gpt-4o-mini"}
        ).json()
        assert [a["id"] for a in httpx.get(f"{base}/v1/agents/", headers=as_acme).json()] == [made["id"]]
        # The password's organization (default) does not see acme's agent.
        admin = {"Authorization": "Bearer hunter2"}
        assert httpx.get(f"{base}/v1/agents/{made['id']}", headers=admin).status_code == 404
        assert httpx.get(f"{base}/openapi.json").status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=30)[0].decode()
    assert "hunter2" not in output and key not in output
