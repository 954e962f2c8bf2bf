"""Writing the next migration: Alembic's autogenerate against a scratch SQLite database at head.

For developers (``nightshift db revision``, ``make migration``): the scratch database is migrated
to the newest revision, compared with ``store/tables.py``, and what differs becomes the next
revision in ``store/migrations/versions`` (``0004_what_it_does.py``, revision ``0004``), formatted
by ruff when it is installed. SQLite shows tables, columns, indexes and constraints added or
dropped, and changed types and nullability; what it cannot show (a changed comment or server
default, anything PostgreSQL-only) and the full-text search objects, made by hand in 0001, are
for the author to add when reading the revision.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import tempfile
from argparse import Namespace
from collections.abc import Iterable
from pathlib import Path

from alembic import command
from alembic.migration import MigrationContext
from alembic.operations.ops import MigrationScript
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from nightshift.errors import Conflict, InvalidInput
from nightshift.store.db import alembic_config, opened


async def write_revision(message: str, *, empty: bool = False) -> Path | None:
    """Write the next revision: the difference between the models and the migrations.

    Args:
        message: What the revision does: its docstring, and its file name after the number.
        empty: Write a revision even when nothing differs (one to fill in by hand, for data).

    Returns:
        The file written, or None when nothing differs and ``empty`` is false.

    Raises:
        InvalidInput: The message has no word to name the file with.
        Conflict: The migrations do not end in one numbered revision (branches to merge first).
    """
    if not any(c.isalnum() for c in message):
        raise InvalidInput("a revision needs a message that says what it does", field="message")
    with tempfile.TemporaryDirectory(prefix="nightshift-revision-") as scratch:
        async with opened(f"sqlite:///{Path(scratch) / 'head.db'}") as engine, engine.begin() as conn:
            path = await conn.run_sync(_autogenerate, message, empty)
    if path is not None:
        await asyncio.to_thread(_format, path)
    return path


def _autogenerate(connection: Connection, message: str, empty: bool) -> Path | None:
    config = alembic_config()
    config.cmd_opts = Namespace(quiet=True)  # the command says what it wrote, once
    config.attributes["connection"] = connection
    command.upgrade(config, "head")

    def keep_changes_only(_context: MigrationContext, _revision: object, directives: list[MigrationScript]) -> None:
        if not empty and all(script.upgrade_ops is None or script.upgrade_ops.is_empty() for script in directives):
            directives.clear()

    written = command.revision(
        config,
        message=message,
        autogenerate=True,
        rev_id=next_revision_id(ScriptDirectory.from_config(config).get_heads()),
        process_revision_directives=keep_changes_only,
    )
    scripts = [s for s in (written if isinstance(written, list) else [written]) if s is not None]
    return Path(scripts[0].path) if scripts else None


def _format(path: Path) -> None:
    """``ruff check --fix`` (drops what the template imports and the revision does not use), then
    ``ruff format``: a new revision passes ``make lint``. Skipped where ruff is not installed."""
    if importlib.util.find_spec("ruff") is None:
        return
    for args in (["check", "--fix", "--quiet"], ["format", "--quiet"]):
        # What ruff cannot fix it prints, for the author to see; it is no reason to stop.
        subprocess.run([sys.executable, "-m", "ruff", *args, str(path)], check=False)


def next_revision_id(heads: Iterable[str]) -> str:
    """The id after the one head of numbered revisions (``0003`` -> ``0004``).

    Raises:
        Conflict: There is no head, several (branches to merge first), or one not numbered.
    """
    found = list(heads)
    if len(found) != 1 or not found[0].isdigit():
        raise Conflict(f"the migrations must end in one numbered revision, not {found or 'none'}")
    return f"{int(found[0]) + 1:04d}"
