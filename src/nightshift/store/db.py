"""The database engine: built once per process from the settings, migrated with Alembic.

Alembic (and the migration files) is imported only when a database is not at the newest revision,
or by ``db revision``: every start of a server finds its database at head, and knows it from one
row, without the import.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import URL, Connection, Engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from nightshift.config import DEFAULT_POOL_SIZE, async_database_url
from nightshift.errors import DatabaseUnavailable
from nightshift.store.checkpoints import AUTOCHECKPOINT_PAGES
from nightshift.store.clean import dumps
from nightshift.store.sqlite_driver import one_hop_dbapi

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


# A pooled PostgreSQL connection idle for longer than this is pinged before it is handed out.
IDLE_PING_SECONDS = 5.0


def create_engine(
    url: str, *, echo: bool = False, idle_ping_seconds: float = IDLE_PING_SECONDS, pool_size: int = DEFAULT_POOL_SIZE
) -> AsyncEngine:
    """An async engine for a plain or async URL; SQLite files (and their folder) are created on first use.

    SQLite runs in WAL mode with foreign keys on and a busy timeout, so a reader never blocks the
    poller and several connections of one process can write in turn. A PostgreSQL connection that
    sat in the pool for ``idle_ping_seconds`` is pinged before use, and replaced if it is dead.

    Connections are opened as needed up to ``pool_size`` and kept; a request that finds them all in
    use waits for one. None is opened beyond (SQLAlchemy's overflow): an overflow connection is
    closed as soon as it is given back, so under load every request past the pool paid for a new
    one (PostgreSQL: a backend forked, asyncpg's type lookups, every statement prepared again;
    SQLite: a thread, the schema parsed, the pragmas), which makes a busy server slower exactly
    when it is busiest (``make load`` on PostgreSQL, while a run steps, shows it in the tail
    latencies).
    """
    url = async_database_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        try:
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnavailable(_describe(parsed, exc)) from exc
    # JSON columns (agents' configs, message tool calls, batch results) are read and written by
    # the ten thousand on every step: orjson does it faster than the json module.
    # hide_parameters: a database error's text (logged, or stored as a stage's error) shows the
    # statement but never its values, which are messages, tool arguments and agents' secrets.
    kwargs: dict[str, Any] = {
        "echo": echo,
        "hide_parameters": True,
        "json_serializer": dumps,
        "json_deserializer": orjson.loads,
    }
    if parsed.get_backend_name() == "sqlite" and (not parsed.database or parsed.database == ":memory:"):
        kwargs["poolclass"] = NullPool
    else:
        kwargs.update(pool_size=pool_size, max_overflow=0)
    if parsed.get_driver_name() == "aiosqlite":
        kwargs["module"] = one_hop_dbapi()  # a statement in one hop to SQLite's thread, not four
    engine = create_async_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    else:
        _ping_when_idle(engine.sync_engine, idle_ping_seconds)
    return engine


def _ping_when_idle(engine: Engine, seconds: float) -> None:
    """Ping a pooled connection at checkout only if it has been idle for ``seconds``.

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout: on asyncpg three round trips (BEGIN,
    an empty statement, ROLLBACK), more than a read of one agent makes. A connection that was
    in use a moment ago is alive as far as a ping can tell (the server may die right after a ping
    too; a request that meets a dead connection fails, and SQLAlchemy then drops the pool's older
    connections). One that sat idle longer, through a database restart or an idle timeout, is
    checked, and replaced when the ping fails (the pool retries on ``DisconnectionError``).
    """

    @event.listens_for(engine, "checkin")
    def _idle_from(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("idle_since")  # None for a new connection: nothing to check
        if since is None or time.monotonic() - since < seconds:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError("a pooled connection failed its ping") from exc


def read_only(engine: AsyncEngine) -> AsyncEngine:
    """``engine`` (its pool) for reads that need no transaction: on PostgreSQL its connections
    are in autocommit, so a read is its statements alone, without BEGIN and COMMIT."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine


@asynccontextmanager
async def opened(url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> AsyncIterator[AsyncEngine]:
    """An engine for the length of a block (a command, a test), disposed of when the block ends."""
    engine = create_engine(url, pool_size=pool_size)
    try:
        yield engine
    finally:
        await engine.dispose()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    # A backstop: the serving process checkpoints (``store.checkpoints``), not the writers' commits.
    cursor.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
    cursor.close()


# Full-text search objects the migration makes by hand per dialect; the models don't declare them.
_HAND_MADE = {"ix_messages_fts", "ix_passages_fts"}


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Alembic filter: leave out the full-text search tables, triggers and indexes."""
    if name is None:
        return True
    return name not in _HAND_MADE and not name.startswith(("messages_fts", "passages_fts"))


def alembic_config() -> Config:
    """Alembic's config pointing at the migrations shipped inside the package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


# Any fixed number: the advisory lock that lets one process at a time migrate a PostgreSQL database.
MIGRATION_LOCK = 8_283_000


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Migrate the database to ``revision`` (creating it when empty).

    Several server processes may start at once: on PostgreSQL they take turns under an advisory
    lock held until the migration commits, so the later ones find the schema at head.
    """

    def run(connection: Connection) -> None:
        if revision == "head" and _at_head(connection):
            return
        from alembic import command

        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    await check_reachable(engine)
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        await conn.run_sync(run)


def _at_head(connection: Connection) -> bool:
    """Whether the database is already at the newest revision: every start of a server (and of
    every test's app) finds it so, and then reads one row instead of having Alembic load and
    compile every migration file to find out that there is nothing to do."""
    return _current_revisions(connection) == (head_revision(),)


def _current_revisions(connection: Connection) -> tuple[str, ...]:
    """The revisions Alembic recorded in the database (its ``alembic_version`` table), none when empty."""
    if not connection.dialect.has_table(connection, "alembic_version"):
        return ()
    return tuple(row[0] for row in connection.execute(text("SELECT version_num FROM alembic_version")))


@functools.cache
def head_revision() -> str | None:
    """The newest revision of the migrations shipped with this process's code, read once.

    ``db revision`` names each revision by its number and its file after it
    (``versions/NNNN_what_it_does.py``, revising the one before), so the newest is the highest
    number of the versions folder: read from the file names, without Alembic.
    """
    numbers = [path.name[:4] for path in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")]
    return max(numbers, default=None)


async def check_reachable(engine: AsyncEngine) -> None:
    """Connect once; a database that cannot be reached raises ``DatabaseUnavailable`` in one line.

    Raises:
        DatabaseUnavailable: The server is down or elsewhere, the database or the user does not
            exist, or the SQLite file cannot be opened; the message says what to run or check.
    """
    try:
        async with engine.connect():
            pass
    except (DBAPIError, OSError) as exc:
        raise DatabaseUnavailable(_describe(engine.url, exc)) from exc


def _describe(url: URL, exc: BaseException) -> str:
    if url.get_backend_name() == "sqlite":
        return f"cannot open the SQLite database {url.database}: {_reason(exc)}; check NIGHTSHIFT_DATABASE_URL"
    host, port, user, database = url.host or "localhost", url.port or 5432, url.username or "postgres", url.database
    where = f"PostgreSQL at {host}:{port}"
    state = _sqlstate(exc)
    if state == "3D000":
        return (
            f"the database {database!r} does not exist on {where}: create it with "
            f"`createdb -h {host} -p {port} -U {user} {database}`, then run this again"
        )
    if state in ("28000", "28P01"):
        return f"{where} refused user {user!r} ({_reason(exc)}): check the user and password in NIGHTSHIFT_DATABASE_URL"
    if state is None and isinstance(exc, OSError):
        return (
            f"cannot connect to {where} ({_reason(exc)}): is PostgreSQL running, and are the host and port "
            "of NIGHTSHIFT_DATABASE_URL right?"
        )
    return f"cannot use {where}, database {database!r}: {_reason(exc)}"


def _sqlstate(exc: BaseException | None) -> str | None:
    """The SQLSTATE of the driver's error under SQLAlchemy's wrapping, if it has one."""
    while exc is not None:
        state = getattr(exc, "sqlstate", None)
        if isinstance(state, str):
            return state
        exc = exc.__cause__ or getattr(exc, "orig", None)
    return None


def _reason(exc: BaseException) -> str:
    while isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.removeprefix("(sqlalchemy.dialects.postgresql.asyncpg.Error) ")
