"""``nightshift batch``: submit, watch, list, read and cancel batch runs on a running server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nightshift.cli_commands import views
from nightshift.cli_commands.client import (
    DEFAULT_SERVER,
    ApiKeyOption,
    CommandFailed,
    ServerClient,
    ServerOption,
    counting,
    failures_reported,
    plural,
    reported_errors,
    stderr,
    stdout,
)
from nightshift.cli_commands.tables import JsonOption, print_json, print_table
from nightshift.cli_commands.watch import is_final, watch_run
from nightshift.client.requests_file import with_agent_ids
from nightshift.domain.batches import BatchRunKind, BatchRunStatus

if TYPE_CHECKING:
    from nightshift.cli_commands.requests_file import RequestLine

batch_app = typer.Typer(
    help="Submit and follow batch runs on a running nightshift server (--server, NIGHTSHIFT_SERVER).",
    no_args_is_help=True,
)

REQUESTS_HELP = """\
A JSON Lines file ('-' for stdin), one request per line in the API's shape:
{"agent_id": "agent-...", "messages": [{"role": "user", "content": "..."}]} or
{"agent_id": "agent-...", "input": "..."}, with an optional "max_steps". Instead of
"agent_id" a line may give "agent_name": it is looked up with GET /v1/agents/?name=...
and must match exactly one agent."""

IntervalOption = Annotated[float, typer.Option("--interval", min=0.05, help="Seconds between polls")]
TimeoutOption = Annotated[
    float | None, typer.Option("--timeout", min=0, help="Stop watching after this many seconds", show_default=False)
]


@batch_app.command("submit")
def submit(
    requests_file: Annotated[str, typer.Argument(metavar="REQUESTS.JSONL", help=REQUESTS_HELP, show_default=False)],
    callback_url: Annotated[
        str | None, typer.Option("--callback-url", help="POSTed the run when it ends", show_default=False)
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="A name for the run (its metadata's 'name')", show_default=False)
    ] = None,
    metadata: Annotated[
        list[str] | None,
        typer.Option(
            "--metadata", "-m", metavar="KEY=VALUE", help="A metadata entry of the run (repeatable)", show_default=False
        ),
    ] = None,
    metadata_json: Annotated[
        str | None,
        typer.Option("--metadata-json", metavar="JSON", help="The run's metadata as a JSON object", show_default=False),
    ] = None,
    finish_within: Annotated[
        float | None,
        typer.Option(
            "--finish-within",
            metavar="SECONDS",
            min=1,
            help="A deadline: the requests a step's batch has not answered in time go through the normal API",
            show_default=False,
        ),
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Then watch the run until it is final")] = False,
    interval: IntervalOption = 1.0,
    timeout: TimeoutOption = None,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """Start a batch run from a requests file and print its id.

    Every line is checked and every agent_name resolved before anything is submitted.

    A bad line is reported with its number, and then nothing is submitted.

    The run's metadata: --metadata-json's object, each --metadata KEY=VALUE, then --name (shown by batch list).

    With --watch the exit code is 0 when the run completed, 1 when it failed or was cancelled.
    """
    with reported_errors():
        run_metadata = run_metadata_of(metadata_json, metadata or [], name)
        # The check of each line is the API's own schema: imported by this command only.
        from nightshift.cli_commands.requests_file import parse_requests

        source, text = _read(requests_file)
        lines = parse_requests(source, text)
        with ServerClient(server, api_key) as client:
            requests = _resolve(client, source, lines)
            # Through the client's create, which sends an Idempotency-Key: a create it retries
            # after a dropped answer never starts a second run.
            with failures_reported(client.api_key):
                run = client.client.batches.create(
                    requests,
                    metadata=run_metadata or None,
                    callback_url=callback_url or None,
                    finish_within_seconds=finish_within,
                )
            typer.echo(run.id)
            notes = stderr()
            notes.print(f"started batch run {run.id} with {plural(len(requests), 'agent')}", markup=False)
            if not watch:
                notes.print(f"follow it with: nightshift batch watch {run.id}", markup=False)
                return
            final = watch_to_the_end(client, run.id, interval=interval, timeout=timeout)
    _finish(final)


@batch_app.command("watch")
def watch(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="The batch run's id", show_default=False)],
    interval: IntervalOption = 1.0,
    timeout: TimeoutOption = None,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """Show a run's progress until it is final, then a summary.

    Shown: agents done (finished, failed, cancelled), the step, tokens, and the cost next to the non-batch cost.

    Exit code 0 when the run completed, 1 when it failed or was cancelled. Ctrl-C stops watching, not the run.
    """
    with reported_errors(), ServerClient(server, api_key) as client:
        final = watch_to_the_end(client, run_id, interval=interval, timeout=timeout)
    _finish(final)


def watch_to_the_end(client: ServerClient, run_id: str, *, interval: float, timeout: float | None) -> dict[str, Any]:
    """Watch with the progress on stderr; Ctrl-C stops watching (exit code 130), not the run."""
    try:
        return watch_run(client, run_id, console=stderr(), interval=interval, timeout=timeout)
    except KeyboardInterrupt:
        stderr().print(f"stopped watching; the run goes on (nightshift batch watch {run_id})", markup=False)
        raise typer.Exit(130) from None


def _finish(run: dict[str, Any]) -> None:
    """Print the run's summary; exit code 1 unless it completed."""
    stdout().print(views.run_summary(run))
    if run["status"] != BatchRunStatus.COMPLETED.value:
        raise typer.Exit(1)


@batch_app.command("list")
def list_runs(
    status: Annotated[
        list[BatchRunStatus] | None,
        typer.Option("--status", "-s", help="Only runs with this status (repeat for several)", show_default=False),
    ] = None,
    failed: Annotated[
        bool,
        typer.Option(
            "--failed",
            help="Only runs that failed or in which some agent failed (a completed run with failed agents too)",
        ),
    ] = False,
    kind: Annotated[
        BatchRunKind | None,
        typer.Option(
            "--kind", "-k", help="Only runs users asked for (main) or sleep-time agents' runs", show_default=False
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many runs")] = 20,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """List batch runs, newest first: name, kind, status, agents done (finished), failures, step and cost.

    A completed run in which agents failed shows as "completed, 3 of 20 failed". Ids are printed
    whole, however narrow the terminal; --json prints the API's runs as one JSON array.
    """
    with reported_errors(), ServerClient(server, api_key) as client:
        statuses = [s.value for s in status] if status else None
        only_failed = {"has_failures": "true"} if failed else {}
        of_kind = {"kind": kind.value} if kind is not None else {}
        runs = client.get("/v1/messages/batches", status=statuses, limit=limit, order="desc", **only_failed, **of_kind)
    if as_json:
        print_json(runs)
        return
    if not runs:
        which = [f"with status {', '.join(statuses)}"] if statuses else []
        which += ["with failures"] if failed else []
        which += [f"of kind {kind.value}"] if kind is not None else []
        stderr().print(" ".join(["no batch runs", *which]), markup=False)
        return
    print_table(stdout(), views.runs_table(runs))


@batch_app.command("costs")
def costs(
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """What the organization's batch runs cost, all told, by kind: the runs users asked for (main)
    apart from the sleep-time agents' upkeep (sleeptime).

    Each row: runs, agents, steps, tokens, the cost, what the normal API would have charged for the
    same tokens, and what the prompt cache saved. --json prints the API's answer.
    """
    with reported_errors(), ServerClient(server, api_key) as client, failures_reported(client.api_key):
        found = client.client.batches.costs()
    if as_json:
        print_json(found.model_dump(mode="json"))
        return
    print_table(stdout(), views.costs_table([kind.model_dump(mode="json") for kind in found.kinds]))


@batch_app.command("messages")
def messages(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="The batch run's id", show_default=False)],
    agent: Annotated[
        str | None, typer.Option("--agent", "-a", help="Only this agent (its id or its name)", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000, help="The last N messages")] = 100,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """Show a run's last messages, oldest first: inputs, replies, tool calls and tool results.

    Reasoning is shown dim above each reply; send_message's "Sent message successfully" results are left out.
    --json prints the API's messages (all of them, oldest first) as one JSON array.
    """
    with reported_errors(), ServerClient(server, api_key) as client:
        agent_id = _agent_id(client, agent) if agent else None
        page = client.get(f"/v1/messages/batches/{run_id}/messages", agent_id=agent_id, limit=limit, order="desc")[
            "messages"
        ]
        if as_json:
            print_json(list(reversed(page)))
            return
        found = [m for m in reversed(page) if views.message_text(m) is not None]
        names = _agent_names(client, {m["agent_id"] for m in found})
    if not found:
        stderr().print("no messages in this run" + (f" for agent {agent}" if agent else ""), markup=False)
        return
    print_table(stdout(), views.messages_table(found, names))


@batch_app.command("cancel")
def cancel(
    run_id: Annotated[str, typer.Argument(metavar="ID", help="The batch run's id", show_default=False)],
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """Cancel a run: no further steps, and its open provider batches are cancelled.

    Steps already applied stay applied. A run that has already ended is left as it is.
    """
    with reported_errors(), ServerClient(server, api_key) as client:
        before = client.get(f"/v1/messages/batches/{run_id}")
        if is_final(before):
            stdout().print(f"run {run_id} had already ended: {before['status']}", markup=False)
            return
        run = client.patch(f"/v1/messages/batches/{run_id}/cancel")
    counts = run["progress"]["agents"]
    stdout().print(
        f"run {run_id} is {run['status']} at step {views.shown_step(run['progress']['step'])}"
        f" ({views.agent_counts(counts) or 'no agents'})",
        markup=False,
    )


def run_metadata_of(as_json: str | None, entries: list[str], name: str | None) -> dict[str, Any]:
    """The metadata ``batch submit`` gives a run, from its options (see its help).

    Raises:
        CommandFailed: The JSON is not an object, or an entry has no ``=`` or no key.
    """
    found: dict[str, Any] = {}
    if as_json is not None:
        try:
            parsed = json.loads(as_json)
        except ValueError as error:
            raise CommandFailed(f"--metadata-json is not valid JSON: {error}") from None
        if not isinstance(parsed, dict):
            raise CommandFailed(f"--metadata-json must be a JSON object ({{...}}), got {type(parsed).__name__}")
        found.update(parsed)
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise CommandFailed(f"--metadata {entry!r}: expected KEY=VALUE (e.g. --metadata team=search)")
        found[key.strip()] = value
    if name is not None:
        found["name"] = name
    return found


def _read(requests_file: str) -> tuple[str, str]:
    if requests_file == "-":
        return "<stdin>", sys.stdin.read()
    try:
        return requests_file, Path(requests_file).read_text(encoding="utf-8")
    except OSError as error:
        raise CommandFailed(f"{requests_file}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise CommandFailed(f"{requests_file}: not a text file (expected UTF-8 JSON Lines)") from None


def _resolve(client: ServerClient, name: str, lines: list[RequestLine]) -> list[dict[str, Any]]:
    """The requests with every agent_name replaced by its agent's id; one request per agent."""
    names = sorted({line.agent_name for line in lines if line.agent_name is not None})
    ids: dict[str, list[str]] = {}
    with counting("looking up agent names", len(names)) as advance:
        for agent_name in names:
            ids[agent_name] = [agent["id"] for agent in client.get("/v1/agents/", name=agent_name, limit=2)]
            advance()
    with failures_reported(client.api_key):
        return with_agent_ids(name, lines, ids)


def _agent_id(client: ServerClient, agent: str) -> str:
    """``--agent``: an agent id as it is, or the id of the one agent with that name."""
    if agent.startswith("agent-"):
        return agent
    matches = client.get("/v1/agents/", name=agent, limit=2)
    if len(matches) != 1:
        raise CommandFailed(
            f"no agent is named {agent!r}" if not matches else f"several agents are named {agent!r}: give its id"
        )
    found: str = matches[0]["id"]
    return found


def _agent_names(client: ServerClient, agent_ids: set[str]) -> dict[str, str]:
    names = {}
    for agent_id in sorted(agent_ids):
        try:
            names[agent_id] = client.get(f"/v1/agents/{agent_id}")["name"]
        except CommandFailed:
            names[agent_id] = agent_id  # deleted since the run: show its id
    return names
