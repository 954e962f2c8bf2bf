"""Shared fixtures: a fresh database per test on SQLite and on PostgreSQL, and the API app.

PostgreSQL is part of the suite: when it cannot be reached the PostgreSQL tests fail (never
skip). Point ``NIGHTSHIFT_TEST_POSTGRES_URL`` at another server if needed.

A test's PostgreSQL database is a clone of a migrated template; when the test is done it is
emptied and handed to the next test (``_PostgresDatabases``), which is much cheaper than a clone
and a drop. One the test changed the schema of, or left connections to, is dropped instead.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from nightshift.api.app import create_app
from nightshift.collector import FULL_COLLECTION_AFTER
from nightshift.config import Settings, async_database_url
from nightshift.emulator import EmulatorAdmin, running_emulator
from nightshift.emulator.environment import sdk_environment
from nightshift.store.db import opened, upgrade
from support.clock import ManualClock
from support.ports import closed_port

POSTGRES_URL = os.environ.get("NIGHTSHIFT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
DATABASES = ["sqlite", "postgresql"]


def _pg_url(database: str) -> str:
    base, _, _ = POSTGRES_URL.rpartition("/")
    return f"{base}/{database}"


async def _pg_admin(*statements: str) -> None:
    engine = create_async_engine(async_database_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def _migrate(url: str) -> None:
    async with opened(url) as engine:
        await upgrade(engine)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    asyncio.run(_migrate(f"sqlite:///{path}"))
    return path


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A migrated PostgreSQL database that each test clones with CREATE DATABASE ... TEMPLATE."""
    name = f"nightshift_tpl_{os.getpid()}"
    asyncio.run(_pg_admin(f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"))
    asyncio.run(_migrate(_pg_url(name)))
    yield name
    asyncio.run(_pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def _drop(name: str) -> None:
    asyncio.run(_pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


# What a database's schema is made of (tables, columns, indexes, constraints, sequences, views,
# functions and triggers in ``public``), as one digest: a database whose digest differs from the
# template's was changed by its test and is not handed on.
_SCHEMA_DIGEST = """
SELECT md5(coalesce(string_agg(item, ';' ORDER BY item), '')) FROM (
    SELECT 'r:' || c.relname || ':' || c.relkind::text AS item
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
    UNION ALL
    SELECT 'a:' || c.relname || '.' || a.attname || ':' || format_type(a.atttypid, a.atttypmod)
        || ':' || a.attnotnull || ':' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'c:' || conname || ':' || pg_get_constraintdef(oid) FROM pg_constraint
    WHERE connamespace = 'public'::regnamespace
    UNION ALL
    SELECT 'i:' || indexname || ':' || indexdef FROM pg_indexes WHERE schemaname = 'public'
    UNION ALL
    SELECT 'f:' || p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
    UNION ALL
    SELECT 't:' || tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
    UNION ALL
    SELECT 's:' || nspname FROM pg_namespace WHERE left(nspname, 3) <> 'pg_' AND nspname <> 'information_schema'
) AS schema
"""
_OTHER_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
_TABLES = "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
_SEQUENCES = "SELECT quote_ident(sequencename) FROM pg_sequences WHERE schemaname = 'public'"


@dataclass(slots=True)
class _PostgresDatabases:
    """This worker's migrated PostgreSQL databases: a clone of the template for a test, or one an
    earlier test used, emptied.

    Emptying (a DELETE per table, the foreign keys' triggers off for it) takes a few milliseconds
    where a clone and a drop take hundreds, most of them spent by the server writing the new
    database's files. A database is handed on only when it is as its test found it but for rows:
    the same schema (its digest and the migration's revision), no session of anyone else left in
    it; otherwise it is dropped, as every database was before.
    """

    template: str
    drop: Callable[[str], None]
    digest: str = ""
    revision: str = ""
    tables: list[str] = field(default_factory=list)
    sequences: list[str] = field(default_factory=list)
    free: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        asyncio.run(self._read_template())

    async def _read_template(self) -> None:
        connection = await asyncpg.connect(_pg_url(self.template))
        try:
            self.digest = await connection.fetchval(_SCHEMA_DIGEST)
            self.revision = await connection.fetchval("SELECT version_num FROM alembic_version")
            self.tables = [row[0] for row in await connection.fetch(_TABLES)]
            self.sequences = [row[0] for row in await connection.fetch(_SEQUENCES)]
        finally:
            await connection.close()

    def take(self) -> str:
        """A migrated database holding no row but the migration's own."""
        if self.free:
            return self.free.pop()
        name = f"nightshift_t_{uuid.uuid4().hex[:12]}"
        asyncio.run(_pg_admin(f"CREATE DATABASE {name} TEMPLATE {self.template}"))
        return name

    def give_back(self, name: str) -> None:
        """Empty ``name`` for the next test, or drop it when its test left more than rows behind."""
        if asyncio.run(self._emptied(name)):
            self.free.append(name)
        else:
            self.drop(name)

    def drop_all(self) -> None:
        for name in self.free:
            self.drop(name)
        self.free.clear()

    async def _emptied(self, name: str) -> bool:
        try:
            connection = await asyncpg.connect(_pg_url(name))
        except (OSError, asyncpg.PostgresError):
            return False
        try:
            if not await self._alone(connection):
                return False
            async with connection.transaction():
                await connection.execute("SET LOCAL lock_timeout = '2s'")
                if await connection.fetchval(_SCHEMA_DIGEST) != self.digest:
                    return False
                if await connection.fetch("SELECT version_num FROM alembic_version") != [(self.revision,)]:
                    return False
                await connection.execute("SET LOCAL session_replication_role = replica")
                await connection.execute("".join(f"DELETE FROM {table};" for table in self.tables))
                for sequence in self.sequences:
                    await connection.execute(f"ALTER SEQUENCE {sequence} RESTART")
            return True
        except asyncpg.PostgresError:
            return False
        finally:
            await connection.close()

    @staticmethod
    async def _alone(connection: asyncpg.Connection) -> bool:
        """Whether no other session is left in the database (the test's own close as it ends: a
        closed connection's server process may take a moment to go)."""
        for _ in range(20):
            if await connection.fetchval(_OTHER_SESSIONS) == 0:
                return True
            await asyncio.sleep(0.01)
        return False


@pytest.fixture(scope="session")
def _pg_databases(postgres_template: str, _pg_dropper: Callable[[str], None]) -> Iterator[_PostgresDatabases]:
    databases = _PostgresDatabases(postgres_template, _pg_dropper)
    yield databases
    databases.drop_all()


@pytest.fixture(scope="session")
def _pg_dropper() -> Iterator[Callable[[str], None]]:
    """Drops a test's PostgreSQL database in a thread of its own, off the next test's way.

    A drop waits on the server's disk (it can take longer than the test); the session's end waits
    for every drop, and a drop that failed fails it.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-drop")
    pending: list[Future[None]] = []
    yield lambda name: pending.append(pool.submit(_drop, name))
    pool.shutdown(wait=True)
    for drop in pending:
        drop.result()


@contextmanager
def _fresh_database(request: pytest.FixtureRequest, directory: Path) -> Iterator[str]:
    """A copy of the migrated template of ``request.param``'s kind, dropped when the block ends."""
    if request.param == "sqlite":
        path = directory / "nightshift.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    databases: _PostgresDatabases = request.getfixturevalue("_pg_databases")
    name = databases.take()
    yield _pg_url(name)
    databases.give_back(name)


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A plain URL of a fresh, migrated database: SQLite, then PostgreSQL."""
    with _fresh_database(request, tmp_path) as url:
        yield url


@pytest.fixture(scope="module", params=DATABASES)
def module_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh, migrated database shared by the tests of one module: SQLite, then PostgreSQL.

    For tests behind one server per module, whose start costs more than the tests themselves;
    such tests must not depend on each other (their own names, or an organization of their own).
    """
    with _fresh_database(request, tmp_path_factory.mktemp("module-db")) as url:
        yield url


@pytest.fixture(scope="module")
def sqlite_module_db_url(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> str:
    """A migrated SQLite database shared by one module's tests, for a module that overrides
    ``module_db_url`` with it: what it checks (a command's output) does not depend on the database."""
    path = tmp_path_factory.mktemp("module-sqlite") / "nightshift.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=DATABASES)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A plain URL of a new, empty database (nothing migrated): SQLite, then PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    drop = request.getfixturevalue("_pg_dropper")
    name = f"nightshift_e_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_admin(f"CREATE DATABASE {name}"))
    yield _pg_url(name)
    drop(name)


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    async with opened(db_url) as engine:
        yield engine


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "settings(**values): build the test's app with these settings")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep CPython's cycle collector from walking the test process's whole heap again and again.

    By the end of collection a test process holds every module the suite imports and every test it
    collected, which it keeps to the end, and each full collection walked all of it, many times per
    process. Those objects move to the collector's permanent generation, and full collections come as
    rarely as in a serving worker. Young cycles are still collected as they come.
    """
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_AFTER)


@pytest.fixture
def settings(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Settings:
    """The app's settings: a quick poller over the test's database, with the values of the test's
    ``@pytest.mark.settings(name=value, ...)`` markers (module and test; the test's own win).

    A module whose tests start no batch run says ``settings(poller=False)``: its apps answer the
    same without a poller, which would only look for work every poll interval of every test.
    """
    values: dict[str, Any] = {"home": tmp_path / "home", "database_url": db_url, "poll_interval_seconds": 0.05}
    for marker in reversed(list(request.node.iter_markers("settings"))):
        values.update(marker.kwargs)
    return Settings(**values)  # the environment's NIGHTSHIFT_* for the rest, as the server reads them


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test (see ``support.ports``)."""
    with closed_port() as port:
        yield port


@pytest.fixture
def clock() -> ManualClock:
    """The app's clock: from a fixed time years away from the machine's (so that a row stamped by
    the machine's clock stands out), running on until the test advances it (to let a lease, a
    backoff or a poll interval pass at once)."""
    return ManualClock()


@pytest.fixture
async def app(settings: Settings, clock: ManualClock) -> AsyncIterator[FastAPI]:
    """The app with its lifespan running."""
    application = create_app(settings, clock=clock)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client calling the app in-process."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as http:
        yield http


# The provider emulator: one per session on a free port, reset before each test that uses it.

ANTHROPIC_KEY = "sk-ant-test"
OPENAI_KEY = "sk-openai-test"
GEMINI_KEY = "gemini-test-key"
_FOREIGN_VARIABLES = (
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_PROFILE",
    "OPENAI_CUSTOM_HEADERS",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
)


@pytest.fixture(scope="session")
def emulator_url() -> Iterator[str]:
    with running_emulator() as url:
        yield url


@pytest.fixture(scope="session")
def _resetter(emulator_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator_url) as client:
        yield client


def _point_sdks_at(emulator_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _FOREIGN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in sdk_environment(emulator_url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)


@pytest.fixture
def emulator(emulator_url: str, _resetter: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> str:
    """The emulator's base URL, freshly reset, with the SDK variables pointing at it."""
    _resetter.post("/_emulator/reset").raise_for_status()
    _point_sdks_at(emulator_url, monkeypatch)
    return emulator_url


@pytest.fixture(scope="module")
def module_emulator(emulator_url: str) -> Iterator[str]:
    """The emulator's base URL, the SDK variables pointing at it for the whole module.

    For a server shared by a module's tests: it may build its provider clients during any of them.
    Each test still asks for ``emulator`` to start from a reset emulator.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        _point_sdks_at(emulator_url, monkeypatch)
        yield emulator_url


@pytest.fixture
async def admin(emulator: str) -> AsyncIterator[EmulatorAdmin]:
    async with EmulatorAdmin(emulator) as client:
        yield client
