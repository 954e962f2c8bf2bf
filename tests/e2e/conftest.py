"""End-to-end fixtures shared by the server-process tests.

One server per module (uvicorn in a thread, the emulator as its providers) on a database of the
module's own, SQLite then PostgreSQL: starting a server costs more than most tests that call it.
Each test gets an organization of its own on it (``api_key``), so that what it lists is what it
made, whatever the module's other tests left behind.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from letta_client import DefaultHttpxClient, Letta

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.serving import running_server
from nightshift.store.db import create_engine
from support import warm_start
from support.letta_client_1_12 import letta_client_1_12
from support.orgs import SERVER_PASSWORD, new_organization_key
from support.processes import ToolCallLog


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the fork server the server processes of these tests are forked from
    (``support.warm_start``): it imports the server while the first tests run."""
    warm_start.prepare()


@pytest.fixture(scope="session")
def tls_context() -> ssl.SSLContext:
    """One TLS context for every test's clients: httpx builds one per client otherwise (reading the
    CA bundle), which costs more than most calls a test makes. The servers here are plain HTTP."""
    return ssl.create_default_context()


@pytest.fixture
def tool_log() -> Iterator[ToolCallLog]:
    """Where the slow tool reports its starts (see ``slow_tool_source``)."""
    log = ToolCallLog()
    yield log
    log.close()


@pytest.fixture(scope="module")
def server_options() -> dict[str, Any]:
    """More settings of the module's server (a module overrides this fixture to set some)."""
    return {}


@pytest.fixture(scope="module")
def base_url(
    tmp_path_factory: pytest.TempPathFactory, module_db_url: str, module_emulator: str, server_options: dict[str, Any]
) -> Iterator[str]:
    """The base URL of the module's server."""
    settings = Settings(
        home=tmp_path_factory.mktemp("home"),
        database_url=module_db_url,
        poll_interval_seconds=0.05,
        server_password=SERVER_PASSWORD,
        **server_options,
    )
    with running_server(create_app(settings)) as url:
        yield url


@pytest.fixture(scope="module")
def organizations(module_db_url: str) -> Iterator[Callable[[], str]]:
    """A function that makes an organization in the module's database and returns an admin key of it.

    One engine (on an event loop of the module's own) serves every test of the module: opening a
    database per test costs more than the two rows it writes. It is closed before the database
    is handed on.
    """
    # (With a loop factory the runner leaves the thread's current event loop alone.)
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        engine = create_engine(module_db_url, pool_size=1)
        try:
            yield lambda: runner.run(new_organization_key(engine))
        finally:
            runner.run(engine.dispose())


@pytest.fixture
def api_key(organizations: Callable[[], str]) -> str:
    """An admin key of an organization of the test's own on the module's server."""
    return organizations()


@pytest.fixture
def letta(base_url: str, api_key: str, emulator: str, tls_context: ssl.SSLContext) -> Iterator[Letta]:
    """letta-client in the test's organization, the emulator reset."""
    # No retries: a failing call must fail the test at once, not be retried into a pass.
    # The SDK's own defaults (redirects followed, its connection limits), but for the TLS context.
    with (
        DefaultHttpxClient(verify=tls_context, timeout=60) as transport,
        Letta(base_url=base_url, api_key=api_key, max_retries=0, timeout=60, http_client=transport) as client,
    ):
        yield client


@pytest.fixture
def letta_1_12(base_url: str, api_key: str, emulator: str, tls_context: ssl.SSLContext) -> Iterator[Any]:
    """letta-client 1.12.1 (what ``pip install letta-client`` gives today: no batches) in the
    test's organization, the emulator reset."""
    sdk = letta_client_1_12()
    with (
        sdk.DefaultHttpxClient(verify=tls_context, timeout=60) as transport,
        sdk.Letta(base_url=base_url, api_key=api_key, max_retries=0, timeout=60, http_client=transport) as client,
    ):
        yield client


@pytest.fixture
def http(base_url: str, api_key: str, emulator: str, tls_context: ssl.SSLContext) -> Iterator[httpx.Client]:
    """Plain HTTP in the test's organization, for what letta-client does not send."""
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60, verify=tls_context) as client:
        yield client
