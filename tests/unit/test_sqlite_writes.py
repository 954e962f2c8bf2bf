"""Which databases have files whose writes can wake a poller (``store/sqlite_writes.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import make_url

from nightshift.store.sqlite_writes import database_file, database_writes


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:///:memory:",
        "sqlite://",
        "sqlite:///file:shared?mode=memory&cache=shared&uri=true",
        "postgresql+asyncpg://postgres@127.0.0.1/test",
    ],
)
def test_a_database_in_memory_or_elsewhere_has_no_file_to_watch(url: str) -> None:
    assert database_file(make_url(url)) is None


def test_a_relative_path_is_the_file_it_names_from_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert database_file(make_url("sqlite+aiosqlite:///data/nightshift.db")) == tmp_path / "data" / "nightshift.db"


def test_a_link_is_followed_to_the_folder_sqlite_writes_its_log_in(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "nightshift.db").touch()
    (tmp_path / "link.db").symlink_to(tmp_path / "real" / "nightshift.db")
    assert database_file(make_url(f"sqlite:///{tmp_path / 'link.db'}")) == tmp_path / "real" / "nightshift.db"


async def test_a_wait_cancelled_as_the_database_is_written_ends_cancelled(tmp_path: Path) -> None:
    # A poller told to stop cancels its watch: a cancellation that comes between the write's
    # report and the wait's return must not be lost (the watch would go on, and the poller's
    # shutdown would wait its whole grace for it). Each round cancels one loop step later.
    database = tmp_path / "nightshift.db"
    with database_writes(make_url(f"sqlite:///{database}")) as writes:
        assert writes is not None
        for steps in range(8):
            writes.forget()
            waiting = asyncio.create_task(writes.next(60))
            await asyncio.sleep(0)  # it is waiting
            database.write_bytes(b"a commit")
            for _ in range(steps):
                await asyncio.sleep(0)
            returned = waiting.done()  # it saw the write before the cancellation came
            waiting.cancel()
            if returned:
                await waiting  # (raises nothing: it had returned)
            else:
                with pytest.raises(asyncio.CancelledError):
                    await waiting
