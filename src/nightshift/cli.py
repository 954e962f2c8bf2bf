"""The ``nightshift`` command. Sync lives only here: each command runs one ``asyncio.run``."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Coroutine
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nightshift.cli_commands import agents_app, batch_app, sleeptime_app
from nightshift.cli_commands.tables import JsonOption, print_json, print_table
from nightshift.collector import collector_paused, no_collection_at_exit
from nightshift.config import Settings
from nightshift.domain.orgs import ApiKey
from nightshift.errors import Conflict, DatabaseUnavailable, InvalidInput, NotFound
from nightshift.tracing import shutdown_tracing

T = TypeVar("T")

app = typer.Typer(
    help="nightshift: run thousands of stateful LLM agents through the providers' batch APIs, at half price.",
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(help="Manage the database schema.", no_args_is_help=True)
keys_app = typer.Typer(help="Manage API keys (each maps a caller to one organization).", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")
app.add_typer(agents_app, name="agents")
app.add_typer(batch_app, name="batch")
app.add_typer(sleeptime_app, name="sleeptime")
console = Console()


def _print_version(asked: bool) -> None:
    """The version of the installed distribution (its metadata), not a constant that can drift from it."""
    if asked:
        from importlib.metadata import version

        console.print(f"nightshift {version('nightshift')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True)
    ] = False,
) -> None:
    """The options of ``nightshift`` itself, before any command (the help text is the app's)."""


def _run(work: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``, with a database that cannot be reached reported in one line (exit code 1)."""
    try:
        return asyncio.run(work)
    except DatabaseUnavailable as exc:
        console.print(f"[red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


async def _check_database(url: str) -> None:
    from nightshift.store.db import check_reachable, opened

    async with opened(url) as engine:
        await check_reachable(engine)


def _configure_observability(settings: Settings) -> None:
    """Logging, and traces when asked for, of a long-running command: see ``nightshift.logs`` and
    ``nightshift.tracing``."""
    import os

    from nightshift.logs import configure_logging, known_secrets
    from nightshift.providers.registry import providers
    from nightshift.tracing import configure_tracing

    secrets = known_secrets(settings, os.environ, [info.key_variable for info in providers()])
    configure_logging(settings, secrets=secrets)
    try:
        configure_tracing()
    except InvalidInput as exc:
        console.print(f"[red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


async def _migrate(url: str) -> None:
    from nightshift.store.db import opened, upgrade

    async with opened(url) as engine:
        await upgrade(engine)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to listen on [default: 127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on [default: 8283]")] = None,
) -> None:
    """Run the API server (migrating the database first)."""
    # The server's modules and its routes make a few hundred thousand objects, none of them
    # garbage: the cycle collector would walk them again and again while they are made.
    with collector_paused():
        import uvicorn

        from nightshift.api.app import create_app
        from nightshift.batch.poller_process import fork_early
        from nightshift.services.catalog import check_extra_models
        from nightshift.serving import connection_options

    settings = Settings()
    _run(_check_database(settings.resolved_database_url))  # one line for a database it cannot reach
    try:
        check_extra_models(settings.extra_models)
    except InvalidInput as exc:
        console.print(f"[red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if settings.poller and settings.poller_process:
        # Before anything starts: the child shares the modules imported so far (the lifespan starts it).
        fork_early(lambda metrics_file: _poller_child(settings, metrics_file))
    _configure_observability(settings)
    application = create_app(settings, poller_process=settings.poller_process)
    try:
        uvicorn.run(
            application,
            host=host or settings.host,
            port=port or settings.port,
            log_config=None,  # uvicorn's loggers go through ours (configured above), in the same format
            log_level=None,
            # On SIGTERM the requests in flight get this long; then the lifespan drains the poller.
            timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds),
            **connection_options(settings),
        )
    finally:
        shutdown_tracing()
        no_collection_at_exit()


@app.command()
def poll(
    once: Annotated[bool, typer.Option("--once", help="Do one pass and exit (instead of polling forever)")] = False,
    metrics_file: Annotated[
        Path | None,
        typer.Option(help="Write this process's metrics there after each pass (Prometheus text format)"),
    ] = None,
    parent: Annotated[
        int | None, typer.Option(hidden=True, help="serve's process id: this poller is its child and ends with it")
    ] = None,
) -> None:
    """Advance batch runs: submit, poll, apply results and send callbacks (serve does this too).

    On SIGTERM or SIGINT it claims nothing more, finishes the stage in progress (for
    NIGHTSHIFT_SHUTDOWN_GRACE_SECONDS at most) and gives its leases back before it exits. A new
    run is started at once (PostgreSQL's NOTIFY; on SQLite, a look after a commit, asked about at
    each write to the database's files on Linux, and every NIGHTSHIFT_RUN_QUEUE_SECONDS).
    """
    from nightshift.batch.poller_process import die_with_parent

    settings = Settings()
    _configure_observability(settings)
    if parent is not None:
        die_with_parent(parent)
    handled = _polling(settings, once=once, metrics_file=metrics_file, parent=parent)
    if once:
        console.print(f"handled {handled} provider batches and callbacks")


def _poller_child(settings: Settings, metrics_file: Path) -> int:
    """What ``serve``'s forked poller child runs once started: ``poll --parent --metrics-file``."""
    import os

    try:
        _configure_observability(settings)
        return _polling(settings, once=False, metrics_file=metrics_file, parent=os.getppid())
    except typer.Exit as exc:
        return exc.exit_code


def _polling(settings: Settings, *, once: bool, metrics_file: Path | None, parent: int | None) -> int:
    """Poll until SIGTERM or SIGINT (or the parent's end), or once; returns the work done by one
    pass (``once``), else 0."""
    import signal

    from nightshift.batch.callbacks import CallbackRules
    from nightshift.batch.poller import drain, poll_forever, poll_once
    from nightshift.batch.poller_process import watch_parent, write_figures
    from nightshift.batch.worker import worker_of
    from nightshift.parts import running_parts
    from nightshift.store.checkpoints import checkpointing
    from nightshift.store.db import opened, upgrade

    async def run() -> int:
        async with opened(settings.resolved_database_url, pool_size=settings.database_pool_size) as engine:
            if parent is None:
                await upgrade(engine)  # (serve has migrated the database before it started this poller)
            # serve's API process checkpoints for its poller child; a poller on its own does it itself.
            async with (
                running_parts(settings, engine) as parts,
                checkpointing(engine) if parent is None else contextlib.nullcontext(),
            ):
                worker, callbacks = worker_of(parts), CallbackRules.of(settings)
                if once:
                    return await poll_once(worker, callbacks)
                figures = (lambda: write_figures(parts.metrics, metrics_file)) if metrics_file else None
                warming = asyncio.create_task(parts.providers.warm(), name="providers-warm")
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, stop.set)
                polling = poll_forever(worker, callbacks, after_pass=figures, queue_seconds=settings.run_queue_seconds)
                poller = asyncio.create_task(polling, name="poller")
                waits = [poller, asyncio.create_task(stop.wait())]
                if parent is not None:
                    waits.append(asyncio.create_task(watch_parent(parent)))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                await drain(worker, poller, grace=settings.shutdown_grace_seconds)
                for waiting in (*waits, warming):
                    waiting.cancel()
                if figures is not None:
                    figures()
                return 0

    try:
        return _run(run())
    finally:
        shutdown_tracing()
        no_collection_at_exit()


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision")] = "head") -> None:
    """Create or migrate the database named by NIGHTSHIFT_DATABASE_URL (default: a SQLite file)."""
    from nightshift.store.db import opened, upgrade

    settings = Settings()

    async def run() -> None:
        async with opened(settings.resolved_database_url) as engine:
            await upgrade(engine, revision)

    _run(run())
    console.print(f"database at [bold]{_safe_url(settings.resolved_database_url)}[/] is at {revision}")


@db_app.command("revision")
def db_revision(
    message: Annotated[
        str, typer.Option("--message", "-m", help="What the revision does (its docstring and file name)")
    ],
    empty: Annotated[
        bool, typer.Option("--empty", help="Write a revision even when the models did not change, to fill in by hand")
    ] = False,
) -> None:
    """Write the next migration from the difference between store/tables.py and the migrations.

    For developers (make migration NAME=...): a scratch SQLite database is migrated to the newest
    revision and compared with the models; the difference is written to
    store/migrations/versions with the next number. Read it before you commit it.
    """
    from nightshift.store.revisions import write_revision

    try:
        path = _run(write_revision(message, empty=empty))
    except (InvalidInput, Conflict) as exc:
        console.print(f"[red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if path is None:
        console.print(
            "store/tables.py and the migrations agree: nothing written (--empty writes a revision to fill in by hand)",
            highlight=False,
            soft_wrap=True,
        )
        return
    console.print(f"wrote {_shown(path)}: read it, then commit it with the change", highlight=False, soft_wrap=True)


@keys_app.command("create")
def keys_create(
    org: Annotated[str, typer.Option(help="Organization the key belongs to (created if new)")] = "default",
    name: Annotated[str, typer.Option(help="A name for the key, to recognise it later")] = "api-user",
    admin: Annotated[
        bool, typer.Option("--admin", help="The key may list, create and revoke its organization's keys (/v1/keys)")
    ] = False,
) -> None:
    """Create an API key. It is printed once; only its hash and prefix are stored."""
    from nightshift.clock import SYSTEM_CLOCK
    from nightshift.services.keys import create_key
    from nightshift.store.db import opened, upgrade
    from nightshift.store.orgs import ensure_default_org, get_or_create_org

    settings = Settings()

    async def run() -> tuple[ApiKey, str]:
        async with opened(settings.resolved_database_url) as engine:
            await upgrade(engine)
            async with engine.begin() as conn:
                now = SYSTEM_CLOCK.now()
                await ensure_default_org(conn, now)
                organization = await get_or_create_org(conn, org, now)
                return await create_key(conn, organization.id, name, now=now, is_admin=admin)

    key, secret = _run(run())
    console.print(f"organization [bold]{escape(org)}[/] ({key.organization_id})", highlight=False)
    console.print(f"{'admin key' if admin else 'key'} {key.id} ({key.key_prefix}...)", highlight=False)
    console.print("API key (shown once, store it now):")
    typer.echo(secret)


@keys_app.command("list")
def keys_list(
    org: Annotated[str | None, typer.Option(help="Only this organization's keys (by name)")] = None,
    as_json: JsonOption = False,
) -> None:
    """List API keys, revoked ones included: never a key itself, only its first characters.

    The ids are printed whole (for keys revoke), however narrow the terminal; --json prints one JSON array.
    """
    from nightshift.store.db import opened, upgrade
    from nightshift.store.keys import list_keys
    from nightshift.store.orgs import find_org, org_names

    settings = Settings()

    async def run() -> tuple[list[ApiKey], dict[str, str]] | None:
        async with opened(settings.resolved_database_url) as engine:
            await upgrade(engine)
            async with engine.connect() as conn:
                org_id = None
                if org is not None:
                    found = await find_org(conn, org)
                    if found is None:
                        return None
                    org_id = found.id
                return await list_keys(conn, org_id=org_id), await org_names(conn)

    listed = _run(run())
    if listed is None:
        console.print(f"[red]error:[/] no organization is named {org!r}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    keys, names = listed
    if as_json:
        print_json([_key_json(key, names) for key in keys])
        return
    if not keys:
        console.print("no API keys" + (f" in organization {org!r}" if org else ""), highlight=False)
        return
    # A console made now: it sees the width (COLUMNS) the command runs in.
    print_table(Console(), _keys_table(keys, names))


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's id (user-..., see keys list)")]) -> None:
    """Revoke an API key: every server refuses it from its next request on. Revoking twice is harmless."""
    from nightshift.clock import SYSTEM_CLOCK
    from nightshift.services.keys import revoke_key
    from nightshift.store.db import opened, upgrade

    settings = Settings()

    async def run() -> tuple[ApiKey, bool]:
        async with opened(settings.resolved_database_url) as engine:
            await upgrade(engine)
            async with engine.begin() as conn:
                return await revoke_key(conn, key_id, now=SYSTEM_CLOCK.now())

    try:
        key, revoked = _run(run())
    except NotFound:
        console.print(f"[red]error:[/] no API key has the id {key_id!r} (see nightshift keys list)", highlight=False)
        raise typer.Exit(1) from None
    shown = f"{key.id} ({escape(key.name)}, {key.key_prefix or 'prefix unknown'})"
    if revoked:
        console.print(f"revoked {shown}", highlight=False, soft_wrap=True)
    else:
        console.print(f"{shown} was already revoked at {_when(key.revoked_at)}", highlight=False, soft_wrap=True)


def _key_json(key: ApiKey, org_names: dict[str, str]) -> dict[str, Any]:
    """One key as ``keys list --json`` prints it: what the table shows, times in ISO 8601."""
    return {
        "id": key.id,
        "organization_id": key.organization_id,
        "organization": org_names.get(key.organization_id, key.organization_id),
        "name": key.name,
        "key_prefix": key.key_prefix,
        "is_admin": key.is_admin,
        "status": key.status.value,
        "created_at": key.created_at.isoformat(),
        "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def _keys_table(keys: list[ApiKey], org_names: dict[str, str]) -> Table:
    # No rules, one space between columns, and the times break after the date. The id is never
    # broken (it is what keys revoke takes): the other columns fold first.
    table = Table(box=None, padding=(0, 1, 0, 0), header_style="bold")
    table.add_column("id", no_wrap=True)
    table.add_column("org", overflow="fold", min_width=4)
    table.add_column("name", overflow="fold", min_width=4)
    table.add_column("prefix", no_wrap=True)
    table.add_column("admin")
    for column in ("created", "last used", "revoked"):
        table.add_column(column, min_width=10)
    for key in keys:
        table.add_row(
            key.id,
            escape(org_names.get(key.organization_id, key.organization_id)),
            escape(key.name),
            key.key_prefix or "[dim]unknown[/]",
            "yes" if key.is_admin else "no",
            _when(key.created_at),
            _when(key.last_used_at) if key.last_used_at else "[dim]never[/]",
            f"[red]{_when(key.revoked_at)}[/]" if key.revoked_at else "",
        )
    return table


def _when(moment: datetime | None) -> str:
    """A time in the local zone, to the minute."""
    return moment.astimezone().strftime("%Y-%m-%d %H:%M") if moment is not None else ""


@app.command()
def emulator(
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = 8765,
) -> None:
    """Run the local provider emulator (Anthropic, OpenAI and Gemini, normal and batch APIs)."""
    from nightshift.emulator.environment import sdk_environment
    from nightshift.emulator.server import serve as serve_emulator

    url = f"http://{host}:{port}"
    variables = " ".join(f"{k}={v}" for k, v in sdk_environment(url).items())
    console.print(f"emulator on {url}: point the SDKs at it with\n  export {variables}", soft_wrap=True)
    serve_emulator(host, port)


@app.command()
def demo(
    provider: Annotated[
        str | None,
        typer.Option(
            help="Whose models the agents run on: anthropic, openai or google_ai (gemini) [default: anthropic]"
        ),
    ] = None,
    real: Annotated[
        bool, typer.Option("--real", help="Send the batches to the provider's real API (needs its API key)")
    ] = False,
    agents: Annotated[int, typer.Option(min=1, max=10_000, help="How many agents")] = 50,
    database_url: Annotated[
        str | None,
        typer.Option(help="Database to use [default: a fresh SQLite file, $NIGHTSHIFT_HOME/demo.db]"),
    ] = None,
) -> None:
    """Create fifty agents and step them through one batch run, with live progress; then show
    sleep-time agents keeping what a few users said in memory, in one batch run of their own.

    Without --real it runs offline against the built-in emulator. It has a database of its
    own (made afresh each time), not the server's, unless --database-url names one.
    """
    from nightshift.demo import fresh_demo_database, run_demo
    from nightshift.providers.registry import ProviderInfo, provider_info

    chosen: ProviderInfo | None = None
    if provider is not None:
        try:
            chosen = provider_info(provider)
        except InvalidInput as exc:
            console.print(f"[red]error:[/] {exc.message}")
            raise typer.Exit(2) from None
    settings = Settings()
    settings = settings.model_copy(update={"database_url": database_url or fresh_demo_database(settings.home)})
    _run(_migrate(settings.resolved_database_url))
    raise typer.Exit(run_demo(settings, console, provider=chosen, real=real, agents=agents))


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main() -> None:
    """Entry point of the ``nightshift`` script."""
    app()
