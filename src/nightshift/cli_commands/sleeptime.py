"""``nightshift sleeptime``: step the organization's sleep-time agents now, on a running server."""

from __future__ import annotations

from typing import Annotated

import typer

from nightshift.cli_commands import views
from nightshift.cli_commands.batch import IntervalOption, TimeoutOption, watch_to_the_end
from nightshift.cli_commands.client import (
    DEFAULT_SERVER,
    ApiKeyOption,
    ServerClient,
    ServerOption,
    failures_reported,
    plural,
    reported_errors,
    stderr,
    stdout,
)
from nightshift.domain.batches import BatchRunStatus

sleeptime_app = typer.Typer(
    help="Sleep-time agents (enable_sleeptime) on a running nightshift server (--server, NIGHTSHIFT_SERVER).",
    no_args_is_help=True,
)


@sleeptime_app.command("run")
def run(
    everything: Annotated[
        bool,
        typer.Option(
            "--all", help="Every sleep-time agent whose main agent said anything since its last run, due or not"
        ),
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Then watch the runs until they are final")] = False,
    interval: IntervalOption = 1.0,
    timeout: TimeoutOption = None,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """Step the due sleep-time agents now, rather than when the poller next gathers them, and print
    the ids of the runs queued (kind sleeptime), one a line; "nothing due" when there is none.

    A sleep-time agent is due after so many turns of its main agent (its group's frequency); one
    still in its previous run stays due.

    With --watch the exit code is 0 when every run completed, 1 otherwise.
    """
    with reported_errors(), ServerClient(server, api_key) as client:
        with failures_reported(client.api_key):
            queued = client.client.sleeptime.run(all=everything)
        notes = stderr()
        if not queued:
            notes.print("nothing due", markup=False)
            return
        for found in queued:
            typer.echo(found.id)
        # A queued run has no agents in its progress until the poller writes its first step.
        notes.print(f"queued {plural(len(queued), 'sleep-time run')}", markup=False)
        if not watch:
            if len(queued) == 1:
                notes.print(f"follow it with: nightshift batch watch {queued[0].id}", markup=False)
            return
        finals = [watch_to_the_end(client, found.id, interval=interval, timeout=timeout) for found in queued]
    for final in finals:
        stdout().print(views.run_summary(final))
    if any(final["status"] != BatchRunStatus.COMPLETED.value for final in finals):
        raise typer.Exit(1)
