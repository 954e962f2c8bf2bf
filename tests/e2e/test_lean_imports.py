"""A process imports what it uses: the server does not load the provider SDKs, Alembic or jsonschema
until it needs them, and the CLI's own start does not load the server; a poller builds the
providers whose keys are set before its first run needs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nightshift.providers.clients import ANYIO_ASYNCIO

# What the server would load at start if it did not wait until it needs it.
LATER = ["alembic", "anthropic", "openai", "google", "jsonschema"]

_SERVER_START = """
import asyncio, json, sys
from nightshift.api.app import create_app
from nightshift.cli import app
from nightshift.config import Settings
from nightshift.providers.clients import ProviderSet
from nightshift.store.db import opened, upgrade

async def main():
    async with opened(sys.argv[1]) as engine:
        await upgrade(engine)  # to head, with Alembic: this is a new database
    for module in [m for m in sys.modules if m.split(".")[0] in ("alembic", "mako")]:
        del sys.modules[module]
    async with opened(sys.argv[1]) as engine:
        await upgrade(engine)  # already at head: known without Alembic
    async with ProviderSet() as providers:
        providers.get("anthropic"), providers.get("openai"), providers.get("google_ai")  # looked up, never called
    create_app(Settings())

asyncio.run(main())
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2:]))))
"""


_POLLER_WARMING = """
import asyncio, json, sys
from nightshift.providers.clients import ProviderSet

async def main():
    async with ProviderSet() as providers:
        await providers.warm()
        return {n for m in sys.modules for n in (m, m.split(".")[0])}  # (before the clients close)

print(json.dumps(sorted(asyncio.run(main()) & set(sys.argv[1:]))))
"""


def loaded(code: str, *args: str, keys: tuple[str, ...] = ("ANTHROPIC", "OPENAI", "GEMINI")) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")} | {f"{k}_API_KEY": "key" for k in keys}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    found: list[str] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_a_server_starts_without_what_it_needs_later(tmp_path: Path) -> None:
    assert loaded(_SERVER_START, f"sqlite:///{tmp_path / 'db.sqlite'}", *LATER) == []


def test_the_cli_starts_without_the_server() -> None:
    code = "import json, sys, nightshift.cli; print(json.dumps(sorted(set(sys.modules) & set(sys.argv[1:]))))"
    assert loaded(code, "nightshift.api.app", "nightshift.api.letta_messages", "fastapi", "sqlalchemy") == []


def test_a_poller_builds_the_providers_whose_keys_are_set_and_no_other() -> None:
    assert loaded(_POLLER_WARMING, *LATER, keys=("ANTHROPIC",)) == ["anthropic"]
    assert loaded(_POLLER_WARMING, *LATER, keys=("OPENAI", "GEMINI")) == ["google", "openai"]
    assert loaded(_POLLER_WARMING, *LATER, keys=()) == []


def test_a_poller_loads_what_the_sdks_first_request_would() -> None:
    """Their HTTP client loads anyio's asyncio backend at its first request: a poller's first
    submit would wait for it."""
    assert loaded(_POLLER_WARMING, ANYIO_ASYNCIO, keys=("ANTHROPIC",)) == [ANYIO_ASYNCIO]
    assert loaded(_POLLER_WARMING, ANYIO_ASYNCIO, keys=()) == []
