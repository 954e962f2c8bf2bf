"""The CLI's commands against a live server (SQLite only): each test acts in an organization of
its own, through the key the commands read from the environment, and nothing of the developer's
own server settings leaks into them."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own server settings must not leak into the commands under test."""
    monkeypatch.delenv("NIGHTSHIFT_SERVER", raising=False)
    monkeypatch.delenv("NIGHTSHIFT_API_KEY", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def module_db_url(sqlite_module_db_url: str) -> str:
    """SQLite only (this overrides the SQLite-and-PostgreSQL ``module_db_url`` of conftest)."""
    return sqlite_module_db_url


@pytest.fixture
def server(base_url: str, api_key: str, emulator: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The module's server, the commands acting in the test's own organization (its key in the environment)."""
    monkeypatch.setenv("NIGHTSHIFT_API_KEY", api_key)
    return base_url
