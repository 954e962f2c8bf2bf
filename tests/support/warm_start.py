"""``nightshift serve`` processes forked from one that has imported the server already.

Most of a fresh ``python -m nightshift serve``'s start is importing FastAPI, SQLAlchemy, pydantic
and our routers, and the end-to-end tests start dozens of servers (a test of crashes starts one
after each kill) on two cores. So each test process keeps one process of
multiprocessing's fork server that has made those imports, and each server is a fork of it that
runs ``python -m nightshift`` with the test's command line, environment and output file: a
process of its own to signal, kill and wait for, as a plain one would be.

Only what the interpreter reads as it starts cannot come from the test: the ``PYTHON*``
variables. A server asked for with other values of them than this process has is not started
here (``forkable``).

This process has one fork server, and the server's readers of tools use it too (in a server
run in a thread): its modules are the ones named when it starts, so ``prepare`` starts it before
the tests run.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.util
import os
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What ``nightshift serve`` imports before it serves (its command imports them lazily), what
# the readers of tools preload (nightshift.tools.reading), and the SDKs its poller builds the
# providers over as it starts (those whose keys are set: all of them, in the tests).
_PRELOAD = [
    "nightshift.cli",
    "uvicorn",
    "nightshift.api.app",
    "nightshift.batch.poller_process",
    "nightshift.services.catalog",
    "nightshift.serving",
    "nightshift.tools.reading",
    "nightshift.providers.anthropic.client",
    "nightshift.providers.openai.client",
    "nightshift.providers.google_ai.client",
]

# Read by a forked child again, from its own environment (the rest of ``PYTHON*`` is not).
_CHILD_READS = {"PYTHONUNBUFFERED"}

_context = multiprocessing.get_context("forkserver")


@atexit.register  # after multiprocessing.util's own, so run before it
def _kill_left_running() -> None:
    """multiprocessing waits for its children as this process exits: a server a failing test left
    running would hold it for ever (a plain process would only be left behind). Killed instead."""
    for child in multiprocessing.active_children():
        child.kill()


def prepare() -> None:
    """Start this process's fork server with the server's modules (it imports them meanwhile)."""
    _context.set_forkserver_preload(_PRELOAD)
    multiprocessing.forkserver.ensure_running()


def forkable(env: dict[str, str]) -> bool:
    """Whether a server with this environment can be a fork: the interpreter's own variables are ours."""

    def interpreter(variables: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in variables.items() if k.startswith("PYTHON") and k not in _CHILD_READS}

    return interpreter(env) == interpreter(dict(os.environ))


class ForkedProcess:
    """A forked server, with the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (``-N`` when killed by signal N), or None while it runs."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"nightshift server {self.pid}", timeout or 0)
        return self._process.exitcode

    def send_signal(self, signal: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal)

    def kill(self) -> None:
        self._process.kill()


def start(arguments: list[str], env: dict[str, str], log_path: Path) -> ForkedProcess:
    """``python -m nightshift *arguments`` as a fork, its output appended to ``log_path``."""
    prepare()
    process = _context.Process(target=_run, args=(arguments, env, str(log_path)), daemon=False)
    process.start()
    return ForkedProcess(process)


def _run(arguments: list[str], env: dict[str, str], log_path: str) -> None:
    """In the fork: what the interpreter would have set up from the command line and environment, then the CLI."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = _stream(1, unbuffered)
    sys.stderr = _stream(2, unbuffered, errors="backslashreplace")
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # TMPDIR is read again
    time.tzset()
    sys.argv = ["nightshift", *arguments]
    try:
        runpy.run_module("nightshift", run_name="__main__", alter_sys=True)
    finally:
        atexit._run_exitfuncs()  # what the interpreter runs as it exits (multiprocessing's child does not)
        sys.stdout.flush()


def _stream(fd: int, unbuffered: bool, errors: str = "strict") -> io.TextIOWrapper:
    binary = io.FileIO(fd, "w", closefd=False)
    if unbuffered:
        return io.TextIOWrapper(binary, errors=errors, write_through=True)
    return io.TextIOWrapper(io.BufferedWriter(binary), errors=errors, line_buffering=fd == 2)
