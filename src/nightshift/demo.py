"""``nightshift demo``: a server in-process on SQLite, a custom tool and an agent, shown with rich.

The batch-run demo (many agents stepped through the emulator) builds on this.
"""

from __future__ import annotations

import httpx
from rich.console import Console
from rich.table import Table

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.serving import running_server

DEMO_TOOL = '''
def roll_dice(sides: int = 6, count: int = 1) -> str:
    """Roll dice and report the total.

    Args:
        sides: Number of sides on each die.
        count: How many dice to roll.
    """
    import random

    rolls = [random.randint(1, sides) for _ in range(count)]
    return f"rolled {rolls}, total {sum(rolls)}"
'''


def run_demo(settings: Settings, console: Console) -> None:
    """Start the server, create a tool and an agent through the HTTP API, and print them."""
    console.print(f"[bold]nightshift demo[/] database: {settings.resolved_database_url}")
    with running_server(create_app(settings)) as base_url, httpx.Client(base_url=base_url, timeout=30) as http:
        console.print(f"server on {base_url} (API docs at {base_url}/docs)")
        tool = http.put("/v1/tools/", json={"source_code": DEMO_TOOL}).raise_for_status().json()
        agent = (
            http.post(
                "/v1/agents/",
                json={
                    "name": "demo-dungeon-master",
                    "model": "anthropic/claude-3-5-haiku-20241022",
                    "memory_blocks": [
                        {"label": "persona", "value": "A cheerful dungeon master who narrates dice rolls."},
                        {"label": "human", "value": "A new player."},
                    ],
                    "tool_ids": [tool["id"]],
                    "tags": ["demo"],
                },
            )
            .raise_for_status()
            .json()
        )
        messages = http.get(f"/v1/agents/{agent['id']}/messages", params={"order": "asc"}).raise_for_status().json()

    table = Table(title=f"agent {agent['name']} ({agent['id']})")
    table.add_column("field")
    table.add_column("value")
    table.add_row("model", agent["model"])
    table.add_row("tools", ", ".join(t["name"] for t in agent["tools"]))
    for block in agent["blocks"]:
        table.add_row(f"block {block['label']}", f"{block['value']} ({len(block['value'])}/{block['limit']})")
    table.add_row("in-context messages", str(len(agent["message_ids"])))
    console.print(table)
    console.print("[bold]messages[/]: " + ", ".join(m["message_type"] for m in messages))
    console.print(f"roll_dice schema: {tool['json_schema']['parameters']}")
    console.print("next: `nightshift serve`, then open http://127.0.0.1:8283/docs")
