"""``nightshift keys create | list | revoke`` through typer's CliRunner, on SQLite and PostgreSQL.

The keys are then used against the app (in-process, its lifespan running), to see that the CLI's
revocation and the app's record of a key's last use are the same database's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from nightshift.api.app import create_app
from nightshift.cli import app
from nightshift.config import Settings
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.store.db import opened, upgrade

runner = CliRunner()
ID = re.compile(r"user-[0-9a-f-]{36}")


@pytest.fixture(autouse=True)
def _environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NIGHTSHIFT_SERVER_PASSWORD", raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # the table's rows on one line each


@pytest.fixture
def database(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The commands' database: a fresh migrated one, SQLite then PostgreSQL."""
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", db_url)
    return db_url


def _create(*args: str) -> tuple[str, str]:
    """A key made with ``keys create ARGS``: its id and its secret."""
    result = runner.invoke(app, ["keys", "create", *args])
    assert result.exit_code == 0, result.output
    secret = result.output.strip().splitlines()[-1]
    assert secret.startswith("ns-") and len(secret) > 40
    found = ID.search(result.output)
    assert found is not None, result.output
    assert f"({secret[:11]}...)" in result.output
    return found.group(0), secret


def _list(*args: str) -> str:
    result = runner.invoke(app, ["keys", "list", *args])
    assert result.exit_code == 0, result.output
    return result.output


COLUMNS = ("id", "org", "name", "prefix", "admin", "created", "last used", "revoked")


def _row(output: str, key_id: str) -> list[str]:
    """The cells of the table row of ``key_id``, cut where the header's column names start."""
    lines = output.splitlines()
    header = next(line for line in lines if line.startswith("id "))
    starts = [header.index(name) for name in COLUMNS]
    assert starts == sorted(starts), header
    line = next(line for line in lines if line.startswith(key_id))
    ends = [*starts[1:], len(line)]
    return [line[start:end].strip() for start, end in zip(starts, ends, strict=True)]


async def _get(settings: Settings, path: str, secret: str) -> int:
    """Call the app once with ``secret``; the lifespan's end writes the key's last use."""
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
            response = await client.get(path, headers={"Authorization": f"Bearer {secret}"})
    return response.status_code


def test_create_list_use_and_revoke(tmp_path: Path, database: str) -> None:
    admin_id, admin_secret = _create("--org", "acme", "--name", "ops", "--admin")
    plain_id, plain_secret = _create("--org", "acme", "--name", "[bold]ci[/]")
    other_id, other_secret = _create("--org", "bolt", "--name", "bolt-ci")
    secrets = (admin_secret, plain_secret, other_secret)

    everything = _list()
    for secret in secrets:
        assert secret not in everything
        assert secret[:11] in everything  # ns- and 8 characters
        assert secret[:12] not in everything
        assert hashlib.sha256(secret.encode()).hexdigest() not in everything
    assert _row(everything, "id ") == list(COLUMNS)
    admin_row = _row(everything, admin_id)
    assert admin_row[:5] == [admin_id, "acme", "ops", admin_secret[:11], "yes"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", admin_row[5])
    assert admin_row[6:] == ["never", ""]
    assert _row(everything, plain_id)[1:5] == ["acme", "[bold]ci[/]", plain_secret[:11], "no"]  # names are not markup
    assert _row(everything, other_id)[1:5] == ["bolt", "bolt-ci", other_secret[:11], "no"]

    only_acme = _list("--org", "acme")
    assert admin_id in only_acme and plain_id in only_acme and other_id not in only_acme

    # The key works; the app records its use.
    settings = Settings(home=tmp_path / "home", database_url=database, poll_interval_seconds=0.05)
    assert asyncio.run(_get(settings, "/v1/agents/", plain_secret)) == 200
    used = _row(_list("--org", "acme"), plain_id)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", used[6]), used
    assert _row(_list(), admin_id)[6] == "never"

    revoked = runner.invoke(app, ["keys", "revoke", plain_id])
    assert revoked.exit_code == 0, revoked.output
    assert revoked.output.startswith(f"revoked {plain_id}")
    assert plain_secret not in revoked.output
    row = _row(_list("--org", "acme"), plain_id)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", row[7]), row
    # Revoking again changes nothing and says so.
    again = runner.invoke(app, ["keys", "revoke", plain_id])
    assert again.exit_code == 0, again.output
    assert f"{plain_id} ([bold]ci[/], {plain_secret[:11]}) was already revoked at {row[7]}" in again.output
    assert _row(_list("--org", "acme"), plain_id) == row

    # The revoked key is refused; the others still work.
    assert asyncio.run(_get(settings, "/v1/agents/", plain_secret)) == 401
    assert asyncio.run(_get(settings, "/v1/agents/", other_secret)) == 200
    assert asyncio.run(_get(settings, "/v1/keys/", admin_secret)) == 200


@pytest.mark.usefixtures("database")
def test_unknown_ids_and_organizations_are_clear_errors() -> None:
    key_id, _ = _create("--org", "acme")
    unknown = runner.invoke(app, ["keys", "revoke", "user-nope"])
    assert unknown.exit_code == 1
    assert unknown.output == "error: no API key has the id 'user-nope' (see nightshift keys list)\n"
    missing = runner.invoke(app, ["keys", "list", "--org", "nobody"])
    assert missing.exit_code == 1
    assert missing.output == "error: no organization is named 'nobody'\n"
    assert key_id in _list()
    # An organization without keys: an empty list, not an error.
    assert _list("--org", "default") == "no API keys in organization 'default'\n"


def test_keys_made_before_prefixes_are_listed_as_unknown(empty_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", empty_db_url)
    secret = "ns-made-before-revision-0004"

    async def old_key() -> None:
        async with opened(empty_db_url) as engine:
            await upgrade(engine, "0003")
            async with engine.begin() as conn:
                await conn.execute(
                    text("INSERT INTO organizations (id, name, created_at) VALUES (:id, 'default', :at)"),
                    {"id": DEFAULT_ORG_ID, "at": datetime.now(UTC).replace(tzinfo=None)},
                )
                await conn.execute(
                    text(
                        "INSERT INTO users (id, organization_id, name, api_key_hash, created_at)"
                        " VALUES ('user-old', :org, 'legacy', :hash, :at)"
                    ),
                    {
                        "org": DEFAULT_ORG_ID,
                        "hash": hashlib.sha256(secret.encode()).hexdigest(),
                        "at": datetime.now(UTC).replace(tzinfo=None),
                    },
                )

    asyncio.run(old_key())
    listed = _list()  # migrates to head first
    assert _row(listed, "user-old")[1:5] == ["default", "legacy", "unknown", "no"]
    assert _row(listed, "user-old")[6:] == ["never", ""]
    assert secret not in listed


@pytest.mark.usefixtures("database")
@pytest.mark.parametrize("columns", ["60", None], ids=["narrow", "pipe"])
def test_key_ids_stay_whole_on_one_line(columns: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """What keys revoke takes is copied from keys list: a narrow terminal or a pipe (80 columns
    without COLUMNS) must not fold an id over several lines."""
    made = [_create("--org", "a-long-organization-name", "--name", "a-long-key-name-of-someone")[0] for _ in range(2)]
    if columns is None:
        monkeypatch.delenv("COLUMNS")
    else:
        monkeypatch.setenv("COLUMNS", columns)

    listed = _list()

    for key_id in made:
        assert any(key_id in line for line in listed.splitlines()), listed
    as_json = json.loads(_list("--json"))
    assert [k["id"] for k in as_json] == made
    assert as_json[0]["organization"] == "a-long-organization-name"
    assert (as_json[0]["is_admin"], as_json[0]["status"], as_json[0]["revoked_at"]) == (False, "active", None)
    assert json.loads(_list("--json", "--org", "default")) == []  # none: still a JSON array


def test_keys_list_through_a_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``nightshift keys list | cat``, as a process: no terminal, no COLUMNS."""
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", f"sqlite:///{tmp_path}/keys.db")
    monkeypatch.delenv("COLUMNS")
    key_id, _ = _create("--org", "a-long-organization-name", "--name", "a-long-key-name")

    listed = subprocess.run(
        [sys.executable, "-m", "nightshift", "keys", "list"], capture_output=True, text=True, check=True
    ).stdout

    assert any(key_id in line for line in listed.splitlines()), listed
