"""Unit tests are pure logic over plain values: no database, no server, no emulator, no browser.

``make test-fast`` runs them alone, on a machine without PostgreSQL. The suite's fixtures that
would start one of those fail here, naming the folder where such a test belongs.
"""

from __future__ import annotations

from typing import NoReturn

import pytest

_ELSEWHERE = "unit tests take no database, server or emulator: this test belongs under tests/integration"


@pytest.fixture(scope="session")
def sqlite_template() -> NoReturn:
    pytest.fail(_ELSEWHERE)


@pytest.fixture(scope="session")
def postgres_template() -> NoReturn:
    pytest.fail(_ELSEWHERE)


@pytest.fixture
def db_url() -> NoReturn:
    pytest.fail(_ELSEWHERE)


@pytest.fixture
def empty_db_url() -> NoReturn:
    pytest.fail(_ELSEWHERE)


@pytest.fixture(scope="session")
def emulator_url() -> NoReturn:
    pytest.fail(_ELSEWHERE)
