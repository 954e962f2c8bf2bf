"""The API against its own OpenAPI description, with schemathesis: no 5xx, and every response documented.

A live server on SQLite (uvicorn on a loopback port, providers pointed at the emulator) gets a
short, derandomized run of generated requests for every operation, valid and invalid ones. Each
response must not be a server error, its status must be one the description lists for the
operation, and its body must match the schema given for that status.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import schemathesis.wfc.escalation  # before any thread starts (see below)
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from conftest import ANTHROPIC_KEY, OPENAI_KEY
from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.emulator.environment import sdk_environment
from nightshift.serving import running_server

# schemathesis imports its auth escalation module the first time a case is called, while the
# server's thread runs; CPython 3.11 can fail a parse in one thread while another parses
# ("SystemError: AST constructor recursion depth mismatch"): it is imported above, before any
# thread starts.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

SEED = 20261130
# The description the server serves (building the app starts nothing: that is its lifespan's job).
# Every phase runs (the schema's examples, boundary values, then generated valid and invalid
# requests), seeded and derandomized so that each run sends the same requests.
schema = schemathesis.openapi.from_dict(
    create_app(Settings(database_url="sqlite:///unused.db")).openapi(),
    config=schemathesis.Config.from_dict({"seed": SEED}),
)


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory, emulator_url: str) -> Iterator[str]:
    home: Path = tmp_path_factory.mktemp("schemathesis")
    with pytest.MonkeyPatch.context() as env:
        for name, value in sdk_environment(emulator_url).items():
            env.setenv(name, value)
        env.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        env.setenv("OPENAI_API_KEY", OPENAI_KEY)
        app_settings = Settings(
            home=home, database_url=f"sqlite:///{home / 'nightshift.db'}", poll_interval_seconds=0.05
        )
        with running_server(create_app(app_settings)) as url:
            yield url


@schema.parametrize()
@settings(max_examples=10, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case: schemathesis.Case[Any], api_url: str) -> None:
    case.call_and_validate(base_url=api_url, checks=CHECKS)
