"""``batch watch``: poll a run until it is final, with live progress bars on a terminal.

On a terminal the progress (agents done (finished) out of all, finished / failed counts, the step, tokens,
cost against the non-batch cost, and what the batch and the prompt cache saved) is redrawn in
place; into a pipe or a file one line is written each time the progress changes. A server that
stops answering for a while (a restart) is waited for, up to ``UNREACHABLE_GRACE`` seconds; an
error status from the server ends the watch at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from nightshift.cli_commands import views
from nightshift.cli_commands.client import CommandFailed, ServerClient, ServerRefused
from nightshift.domain.batches import TERMINAL_RUN_STATUSES, BatchRunStatus

UNREACHABLE_GRACE = 60.0


def is_final(run: Mapping[str, Any]) -> bool:
    return BatchRunStatus(run["status"]) in TERMINAL_RUN_STATUSES


def watch_run(
    client: ServerClient, run_id: str, *, console: Console, interval: float, timeout: float | None
) -> dict[str, Any]:
    """Poll ``run_id`` every ``interval`` seconds until it is final, showing progress on ``console``.

    Returns:
        The run's final body.

    Raises:
        CommandFailed: the run is unknown, the server went away for too long, or ``timeout``
            seconds passed first.
    """
    path = f"/v1/messages/batches/{run_id}"
    run: dict[str, Any] = client.get(path)
    deadline = None if timeout is None else time.monotonic() + timeout
    display = _LiveProgress(console) if console.is_terminal and not console.is_dumb_terminal else None
    screen = Live(display.render(run), console=console, refresh_per_second=4) if display is not None else None
    last_line = ""
    unreachable_since: float | None = None
    with screen if screen is not None else nullcontext():
        while True:
            if display is not None and screen is not None:
                screen.update(display.render(run))
            else:
                line = views.progress_line(run)
                if line != last_line:
                    console.print(line, markup=False, soft_wrap=True)
                    last_line = line
            if is_final(run):
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise CommandFailed(
                    f"stopped watching after {timeout:g} s: run {run_id} is still {run['status']} and goes on"
                    f" (follow it again with 'nightshift batch watch {run_id}')"
                )
            time.sleep(interval)
            try:
                run = client.get(path)
                unreachable_since = None
            except ServerRefused:
                raise
            except CommandFailed:
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                if now - unreachable_since > UNREACHABLE_GRACE:
                    raise


class _LiveProgress:
    """The bar of agents done, redrawn from each new body of the run."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            console=console,
        )
        self.task: TaskID = self.progress.add_task("agents done", total=None, detail="")

    def render(self, run: Mapping[str, Any]) -> Group:
        counts = run["progress"]["agents"]
        done, total = views.agents_done(counts)
        detail = (
            f"[green]{counts.get('finished', 0)} finished[/] · [red]{counts.get('failed', 0)} failed[/]"
            f" · {counts.get('cancelled', 0)} cancelled · {views.run_status(run)}"
        )
        self.progress.update(self.task, completed=done, total=total or None, detail=detail)
        return Group(self.progress, views.stats_text(run))
