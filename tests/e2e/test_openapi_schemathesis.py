"""The API against its own OpenAPI description, with schemathesis: no 5xx, and every response documented.

A live server on SQLite (``nightshift serve`` on a loopback port, providers pointed at the emulator) gets a
short, derandomized run of generated requests for every operation, valid and invalid ones. Each
response must not be a server error, its status must be one the description lists for the
operation, and its body must match the schema given for that status.
"""

from __future__ import annotations

import ast
import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import schemathesis.pytest
from hypothesis import HealthCheck, settings
from schemathesis import BaseSchema
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
from support.processes import server_environment, spawn, wait_healthy

# Every operation, a few dozen cases each, through a server process: about a minute on two busy
# cores, twice that on a slow machine; the timeout also counts the module's server stopping in the
# teardown.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

SEED = 20261130


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory, emulator_url: str) -> Iterator[str]:
    # The server is a process of its own: CPython 3.11 can fail a parse in one thread while another
    # thread parses ("SystemError: AST constructor recursion depth mismatch"), and hypothesis parses
    # as it generates while a server in a thread would compile what it builds lazily.
    home: Path = tmp_path_factory.mktemp("schemathesis")
    keys = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY}
    env = server_environment(f"sqlite:///{home / 'nightshift.db'}", home, **(sdk_environment(emulator_url) | keys))
    server = spawn("schemathesis", env, home)
    try:
        asyncio.run(wait_healthy(server))
        yield server.base_url
    finally:
        server.stop()


@pytest.fixture(scope="module", autouse=True)
def _one_parse_at_a_time() -> Iterator[None]:
    """CPython 3.11 keeps the depth of the AST it converts to Python objects in one place for every
    thread, so two threads in ``ast.parse`` at once can fail one of them ("SystemError: AST
    constructor recursion depth mismatch"). hypothesis parses lambdas' sources as it generates, and
    a thread an earlier test of this worker left behind may parse too (the standard traceback module
    does, to place its carets): under ``make test`` this test failed so, now and then. The parses of
    this process take turns while it runs."""
    parse: Callable[..., ast.AST] = ast.parse
    turn = threading.Lock()

    def parse_in_turn(*args: object, **kwargs: object) -> ast.AST:
        with turn:
            return parse(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ast, "parse", parse_in_turn)
        yield


@pytest.fixture(scope="module")
def described_api() -> BaseSchema:
    """The description the server serves (building the app starts nothing: that is its lifespan's
    job). Every phase runs (the schema's examples, boundary values, then generated valid and
    invalid requests), seeded and derandomized so that each run sends the same requests."""
    return schemathesis.openapi.from_dict(
        create_app(Settings(database_url="sqlite:///unused.db")).openapi(),
        config=schemathesis.Config.from_dict({"seed": SEED}),
    )


@pytest.fixture(autouse=True)
def _node_id(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32 names each operation's report by rewriting ``Function._nodeid``, which
    pytest 9.2 no longer has: give it one to rewrite (the reports keep the test's id)."""
    request.node._nodeid = request.node.nodeid


# Loaded from a fixture, the operations' tests are built when the test runs, each reported as a
# subtest, not when pytest collects: building them (every boundary case of every operation) was
# paid by each test process at its start, and each process that ran a few of them started a
# server of its own.
schema = schemathesis.pytest.from_fixture("described_api")


@schema.parametrize()
@settings(max_examples=10, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case: schemathesis.Case[Any], api_url: str) -> None:
    case.call_and_validate(base_url=api_url, checks=CHECKS)
