"""``nightshift agents``: create agents from a YAML file and list them, through a running server."""

from __future__ import annotations

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
    ServerRefused,
    counting,
    plural,
    reported_errors,
    stderr,
    stdout,
)
from nightshift.cli_commands.tables import JsonOption, print_json, print_table

if TYPE_CHECKING:
    from nightshift.cli_commands.agents_file import AgentsFile

agents_app = typer.Typer(
    help="Create and list agents on a running nightshift server (--server, NIGHTSHIFT_SERVER).",
    no_args_is_help=True,
)

FROM_FILE_HELP = """\
A YAML file: a list of agents in the API's shape (name, model "provider/model", system,
memory_blocks [{label, value, limit, description}], tools (names), tool_ids, include_base_tools,
tool_rules, tags, metadata), or a mapping with that list under 'agents:' and custom tools under
'tools:' (each {source_code: ...} or {path: file.py}, relative to the YAML file), which are
upserted first so that agents can name them."""


@agents_app.command("create")
def create(
    from_file: Annotated[
        Path, typer.Option("--from-file", "-f", help=FROM_FILE_HELP, dir_okay=False, show_default=False)
    ],
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """Create the agents of a YAML file (see examples/agents.yaml) and print them.

    The whole file is checked first: a problem is reported with its line, and nothing is created.

    When the server refuses an agent, the ones created before it are deleted again: all or nothing.
    """
    # Imported here: the API's schemas (used to check the file) take a while to import.
    from nightshift.cli_commands.agents_file import load_agents_file

    with reported_errors():
        spec = load_agents_file(from_file)
        with ServerClient(server, api_key) as client:
            for tool in spec.tools:
                try:
                    client.put("/v1/tools/", tool.body)
                except ServerRefused as error:
                    raise CommandFailed(f"{spec.where(tool)}: {error.message}") from None
            created = _create_all(client, spec)
        table = views.agents_table(created, title=f"created {plural(len(created), 'agent')} from {spec.name}")
        print_table(stdout(), table)
        if spec.tools:
            stderr().print(f"upserted {plural(len(spec.tools), 'tool')} first", markup=False)


def _create_all(client: ServerClient, spec: AgentsFile) -> list[dict[str, Any]]:
    created: list[dict[str, Any]] = []
    with counting("creating agents", len(spec.agents)) as advance:
        for entry in spec.agents:
            try:
                created.append(client.post("/v1/agents/", entry.body))
            except CommandFailed as error:
                undone = _delete_again(client, created)
                raise CommandFailed(f"{spec.where(entry)}: {error.message}{undone}") from None
            advance()
    return created


def _delete_again(client: ServerClient, created: list[dict[str, Any]]) -> str:
    """Delete the agents created so far; say what became of them."""
    if not created:
        return " (nothing was created)"
    left = []
    for agent in created:
        try:
            client.delete(f"/v1/agents/{agent['id']}")
        except CommandFailed:
            left.append(agent["id"])
    if left:
        return f" ({plural(len(left), 'agent')} created before it could not be deleted: {', '.join(left)})"
    if len(created) == 1:
        return " (the agent created before it was deleted again; nothing was created)"
    return f" (the {len(created)} agents created before it were deleted again; nothing was created)"


@agents_app.command("list")
def list_agents(
    tags: Annotated[
        list[str] | None, typer.Option("--tags", "-t", help="Only agents with this tag (repeat for any of several)")
    ] = None,
    match_all: Annotated[bool, typer.Option("--match-all", help="Require every --tags instead of any")] = False,
    name: Annotated[str | None, typer.Option("--name", help="Only agents with exactly this name")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many agents")] = 100,
    as_json: JsonOption = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: ApiKeyOption = None,
) -> None:
    """List agents, oldest first: id, name, model, tags and custom tools.

    Ids are printed whole, however narrow the terminal; --json prints the API's agents as one JSON array.
    """
    with reported_errors(), ServerClient(server, api_key) as client:
        agents = client.get("/v1/agents/", tags=tags or None, match_all_tags=match_all or None, name=name, limit=limit)
    if as_json:
        print_json(agents)
    else:
        print_table(stdout(), views.agents_table(agents, title=plural(len(agents), "agent")))
    if len(agents) == limit:
        stderr().print(f"showing the first {limit}; pass --limit for more", markup=False)
