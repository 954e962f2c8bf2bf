"""The client commands (``nightshift agents ...``, ``nightshift batch ...``) against a real server.

The tests share the module's server (``tests/e2e/conftest.py``, the provider emulator behind it),
each in an organization of its own, and invoke the commands with typer's CliRunner, as a user types
them. The commands only speak HTTP, so these tests run on SQLite only; the API itself is tested on both
databases elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from nightshift.cli import app
from nightshift.cli_commands.views import saving
from nightshift.emulator import EmulatorAdmin
from support.orgs import SERVER_PASSWORD

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
AGENTS_FILE = EXAMPLES / "agents.yaml"
REQUESTS_FILE = EXAMPLES / "requests.jsonl"
EXAMPLE_AGENTS = ("ada-shop-assistant", "marco-travel-planner", "tess-maths-tutor", "odile-night-poet")
WATCH = ("--interval", "0.05", "--timeout", "60")

runner = CliRunner()


@pytest.fixture(scope="module")
def server_options() -> dict[str, Any]:
    """Every request writes its prompt for an hour: the example agents answer in one step, for
    which the default policy writes nothing, and the watch's cache figure would be zero."""
    return {"cache_policy": "1h"}


@pytest.fixture
def api(http: httpx.Client) -> httpx.Client:
    """The server's HTTP API in the test's organization, to check what the commands did."""
    return http


def cli(*args: str, server: str | None = None, stdin: str | None = None) -> Result:
    """Run ``nightshift *args`` (with ``--server``), as a user would."""
    argv = [*args, "--server", server] if server else list(args)
    return runner.invoke(app, argv, input=stdin)


def create_examples(server: str) -> Result:
    result = cli("agents", "create", "--from-file", str(AGENTS_FILE), server=server)
    assert result.exit_code == 0, result.output
    return result


def run_id_of(result: Result) -> str:
    """The id ``batch submit`` prints: the first line of its stdout."""
    first = result.stdout.strip().splitlines()[0]
    assert first.startswith("batch-"), result.output
    return first


def configure_emulator(emulator: str, **fields: Any) -> None:
    async def configure() -> None:
        async with EmulatorAdmin(emulator) as admin:
            await admin.configure(**fields)

    asyncio.run(configure())


# agents


def test_agents_create_from_the_example_file(server: str, api: httpx.Client) -> None:
    result = create_examples(server)

    assert "created 4 agents from" in result.stdout
    for name in EXAMPLE_AGENTS:
        assert name in result.stdout
    assert "upserted 1 tool first" in result.stderr
    agents = {a["name"]: a for a in api.get("/v1/agents/").json()}
    assert set(agents) == set(EXAMPLE_AGENTS)
    ada = agents["ada-shop-assistant"]
    assert ada["id"] in result.stdout
    assert ada["model"] == "anthropic/claude-3-5-haiku-20241022"
    assert "check_stock" in [t["name"] for t in ada["tools"]]
    assert [r["type"] for r in ada["tool_rules"]] == ["run_first", "continue_loop", "exit_loop"]
    assert {b["label"]: b["limit"] for b in ada["blocks"]} == {"persona": 2000, "human": 2000}
    assert agents["tess-maths-tutor"]["system"].startswith("You are Tess")
    assert agents["marco-travel-planner"]["tags"] == ["example", "travel"]


def test_agents_create_from_a_tool_file_next_to_the_yaml(tmp_path: Path, server: str, api: httpx.Client) -> None:
    (tmp_path / "shout.py").write_text(
        'def shout(text: str) -> str:\n    """Say it loudly.\n\n    Args:\n        text: What to say.\n    """\n'
        "    return text.upper()\n"
    )
    spec = tmp_path / "agents.yaml"
    spec.write_text(
        "tools:\n  - path: shout.py\nagents:\n  - {name: loud, model: openai/gpt-4o-mini, tools: [shout]}\n"
    )

    result = cli("agents", "create", "-f", str(spec), server=server)

    assert result.exit_code == 0, result.output
    (agent,) = api.get("/v1/agents/").json()
    assert "shout" in [t["name"] for t in agent["tools"]]


def test_agents_list_with_and_without_tags(server: str) -> None:
    create_examples(server)

    everyone = cli("agents", "list", server=server)
    travel = cli("agents", "list", "--tags", "travel", "--tags", "creative", server=server)

    assert everyone.exit_code == 0, everyone.output
    for name in EXAMPLE_AGENTS:
        assert name in everyone.stdout
    assert "4 agents" in everyone.stdout
    assert travel.exit_code == 0, travel.output
    assert "marco-travel-planner" in travel.stdout and "odile-night-poet" in travel.stdout
    assert "ada-shop-assistant" not in travel.stdout
    assert "2 agents" in travel.stdout


# batch runs


def test_submit_the_example_requests_by_agent_name_and_watch(server: str, api: httpx.Client) -> None:
    create_examples(server)

    submitted = cli("batch", "submit", str(REQUESTS_FILE), "--watch", *WATCH, server=server)

    assert submitted.exit_code == 0, submitted.output
    run_id = run_id_of(submitted)
    assert f"started batch run {run_id} with 4 agents" in submitted.stderr
    assert f"batch run {run_id}" in submitted.stdout
    assert "completed" in submitted.stdout
    assert "4 (4 finished)" in submitted.stdout
    assert "without the batch discount" in submitted.stdout
    run = api.get(f"/v1/messages/batches/{run_id}").json()
    assert run["status"] == "completed"
    # The summary shows the cache's savings beside the batch's, as the API reports them.
    progress = run["progress"]
    assert progress["cache_savings_usd"] != 0
    batch, cache = saving(progress["batch_savings_usd"], "batch"), saving(progress["cache_savings_usd"], "prompt cache")
    saved = next(line for line in submitted.stdout.splitlines() if "│ savings " in line)
    assert f"{batch}, {cache}" in saved
    assert run["progress"]["agents"]["finished"] == 4
    # The requests reached the agents named in the file.
    ada_id = api.get("/v1/agents/", params={"name": "ada-shop-assistant"}).json()[0]["id"]
    ada_inputs = [
        m
        for m in api.get(f"/v1/messages/batches/{run_id}/messages", params={"agent_id": ada_id}).json()["messages"]
        if m["role"] == "user"
    ]
    assert any("Kettle" in part["text"] for m in ada_inputs for part in m["content"])

    listed = cli("batch", "list", server=server)
    assert listed.exit_code == 0, listed.output
    assert run_id in listed.stdout and "completed" in listed.stdout and "4/4" in listed.stdout
    running = cli("batch", "list", "--status", "running", server=server)
    assert running.exit_code == 0, running.output
    assert run_id not in running.output and "no batch runs with status running" in running.stderr

    everyone = cli("batch", "messages", run_id, server=server)
    assert everyone.exit_code == 0, everyone.output
    for name in EXAMPLE_AGENTS:
        assert name in everyone.stdout

    ada = cli("batch", "messages", run_id, "--agent", "ada-shop-assistant", server=server)
    assert ada.exit_code == 0, ada.output
    assert "Kettle: is it in stock?" in ada.stdout  # the input
    assert 'calls check_stock(item="Kettle")' in ada.stdout  # the tool call
    assert "check_stock → kettle: 12 in stock" in ada.stdout  # the tool's result
    assert "(heartbeat)" in ada.stdout
    assert "marco-travel-planner" not in ada.stdout and "Lisbon" not in ada.stdout

    # Ada's last two messages: her reply, and send_message's result (which is not shown).
    by_id = cli("batch", "messages", run_id, "--agent", ada_id, "--limit", "2", server=server)
    assert by_id.exit_code == 0, by_id.output
    assert "check_stock returned: kettle: 12 in stock" in by_id.stdout
    assert "Kettle: is it in stock?" not in by_id.stdout and "Sent message" not in by_id.stdout


def test_submit_from_stdin_then_watch(server: str, api: httpx.Client) -> None:
    create_examples(server)
    poet = api.get("/v1/agents/", params={"name": "odile-night-poet"}).json()[0]["id"]
    line = json.dumps({"agent_id": poet, "input": "A haiku about coffee at 4 am, please."})

    submitted = cli("batch", "submit", "-", server=server, stdin=line + "\n")

    assert submitted.exit_code == 0, submitted.output
    run_id = run_id_of(submitted)
    assert f"nightshift batch watch {run_id}" in submitted.stderr
    watched = cli("batch", "watch", run_id, *WATCH, server=server)
    assert watched.exit_code == 0, watched.output
    assert "completed" in watched.stdout and "1 (1 finished)" in watched.stdout
    assert f"{run_id}: completed" in watched.stderr  # the last progress line


def test_a_run_submitted_with_a_deadline_carries_it(server: str, emulator: str, api: httpx.Client) -> None:
    create_examples(server)
    submitted = cli("batch", "submit", str(REQUESTS_FILE), "--finish-within", "1800", server=server)
    assert submitted.exit_code == 0, submitted.output
    run = api.get(f"/v1/messages/batches/{run_id_of(submitted)}").json()
    deadline = datetime.fromisoformat(run["deadline"]) - datetime.fromisoformat(run["created_at"])
    assert deadline == timedelta(seconds=1800), run
    refused = cli("batch", "submit", str(REQUESTS_FILE), "--finish-within", "0", server=server)
    assert refused.exit_code != 0 and "--finish-within" in refused.output


def _wait_running(api: httpx.Client, run_id: str) -> None:
    """Until the run's first step is submitted (a server's first submit loads the providers' SDKs:
    a while); the run was queued until then."""
    for _ in range(600):
        if api.get(f"/v1/messages/batches/{run_id}").json()["status"] == "running":
            return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not start")


def test_cancel_a_slow_run(server: str, emulator: str, api: httpx.Client) -> None:
    create_examples(server)
    configure_emulator(emulator, polls_to_end=50)
    submitted = cli("batch", "submit", str(REQUESTS_FILE), server=server)
    assert submitted.exit_code == 0, submitted.output
    run_id = run_id_of(submitted)
    _wait_running(api, run_id)  # a run cancelled while still queued has no step to cancel

    cancelled = cli("batch", "cancel", run_id, server=server)

    assert cancelled.exit_code == 0, cancelled.output
    # Cancelled during its first step, which the API numbers 0 and people 1.
    assert f"run {run_id} is cancelled at step 1 " in cancelled.stdout
    assert api.get(f"/v1/messages/batches/{run_id}").json()["status"] == "cancelled"
    watched = cli("batch", "watch", run_id, *WATCH, server=server)
    assert watched.exit_code == 1, watched.output
    assert "cancelled" in watched.stdout and "4 cancelled" in watched.stdout
    again = cli("batch", "cancel", run_id, server=server)
    assert again.exit_code == 0, again.output
    assert f"run {run_id} had already ended: cancelled" in again.stdout
    assert run_id in cli("batch", "list", "--status", "cancelled", server=server).stdout


def test_steps_count_from_1_as_in_the_dashboard_and_the_demo(server: str, emulator: str, api: httpx.Client) -> None:
    create_examples(server)
    tess = api.get("/v1/agents/", params={"name": "tess-maths-tutor"}).json()[0]["id"]
    configure_emulator(emulator, errors={tess: "invalid_request_error"})
    run_id = run_id_of(cli("batch", "submit", str(REQUESTS_FILE), server=server))

    watched = cli("batch", "watch", run_id, *WATCH, server=server)

    assert watched.exit_code == 0, watched.output
    run = api.get(f"/v1/messages/batches/{run_id}").json()
    # Ada calls check_stock, then answers: the API's steps 0 and 1 are steps 1 and 2.
    assert run["progress"]["step"] == 1
    # The last progress line: completed, but not all well; done counts the agents that finished.
    assert f"{run_id}: completed, 1 of 4 failed, step 2, 3/4 agents done" in watched.stderr
    assert "│ steps            │ 2 " in watched.stdout
    # Tess failed in her first step (the API's step_number 0), shown by name.
    (failure,) = run["progress"]["failures"]
    assert failure["step_number"] == 0
    (row,) = [line for line in watched.stdout.splitlines() if "tess-maths-tutor" in line]
    assert row.split("│")[2].strip() == "1", row
    (listed,) = [line for line in cli("batch", "list", server=server).stdout.splitlines() if run_id in line]
    assert listed.split("│")[6].strip() == "2", listed
    assert listed.split("│")[2].strip() == "completed, 1 of 4 failed", listed
    assert listed.split("│")[4].strip() == "3/4", listed
    assert "│ status           │ completed, 1 of 4 failed" in watched.stdout


def test_the_failed_filter_lists_completed_runs_with_failed_agents(
    server: str, emulator: str, api: httpx.Client
) -> None:
    create_examples(server)
    agents = {a["name"]: a["id"] for a in api.get("/v1/agents/").json()}
    clean = run_id_of(cli("batch", "submit", str(REQUESTS_FILE), "--watch", *WATCH, server=server))
    configure_emulator(emulator, errors={agents["tess-maths-tutor"]: "invalid_request_error"})
    mixed = run_id_of(cli("batch", "submit", str(REQUESTS_FILE), server=server))
    assert cli("batch", "watch", mixed, *WATCH, server=server).exit_code == 0
    assert api.get(f"/v1/messages/batches/{mixed}").json()["status"] == "completed"

    failed = cli("batch", "list", "--failed", server=server)

    assert failed.exit_code == 0, failed.output
    (listed,) = [line for line in failed.stdout.splitlines() if "batch-" in line]
    assert listed.split("│")[1].strip() == mixed and "completed, 1 of 4 failed" in listed, failed.stdout
    assert clean not in failed.stdout
    # With a status too: none of the cancelled runs had failures.
    none = cli("batch", "list", "--failed", "--status", "cancelled", server=server)
    assert none.exit_code == 0 and "no batch runs with status cancelled with failures" in none.stderr

    # Its failed agent deleted since: the run's record stays, the agent marked deleted.
    assert api.delete(f"/v1/agents/{agents['tess-maths-tutor']}").status_code == 200
    watched = cli("batch", "watch", mixed, *WATCH, server=server)
    assert watched.exit_code == 0, watched.output
    assert "│ status           │ completed, 1 of 4 failed" in watched.stdout
    (row,) = [line for line in watched.stdout.splitlines() if "tess-maths-tutor" in line]
    assert "tess-maths-tutor (deleted)" in row, row


def test_watch_gives_up_at_its_timeout(server: str, emulator: str, api: httpx.Client) -> None:
    create_examples(server)
    configure_emulator(emulator, polls_to_end=1000)
    run_id = run_id_of(cli("batch", "submit", str(REQUESTS_FILE), server=server))
    _wait_running(api, run_id)

    watched = cli("batch", "watch", run_id, "--interval", "0.05", "--timeout", "0.3", server=server)

    assert watched.exit_code == 1
    assert f"stopped watching after 0.3 s: run {run_id} is still running" in watched.stderr
    assert cli("batch", "cancel", run_id, server=server).exit_code == 0


# errors: one line each, never a traceback


def test_server_down(refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"
    expected = f"cannot reach the nightshift server at {url}: connection refused — start it with 'nightshift serve'"

    for args in (("agents", "list"), ("batch", "list"), ("batch", "watch", "batch-x"), ("batch", "cancel", "x")):
        result = cli(*args, server=url)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.strip() == expected
        assert "Traceback" not in result.output


def test_server_from_the_environment(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_SERVER", server)

    result = cli("agents", "list")

    assert result.exit_code == 0, result.output
    assert "0 agents" in result.stdout


def test_a_server_that_is_not_a_url() -> None:
    result = cli("agents", "list", server="localhost:8283")

    assert result.exit_code == 1
    assert result.stderr.strip() == "--server must be a URL such as http://127.0.0.1:8283, got 'localhost:8283'"


def test_unknown_run_id(server: str) -> None:
    for command in ("watch", "messages", "cancel"):
        result = cli("batch", command, "batch-nope", server=server)
        assert result.exit_code == 1, (command, result.output)
        assert result.stderr.strip() == "batch run batch-nope not found"


def test_unknown_agent_name_in_messages(server: str) -> None:
    create_examples(server)
    run_id = run_id_of(cli("batch", "submit", str(REQUESTS_FILE), server=server))

    result = cli("batch", "messages", run_id, "--agent", "nobody", server=server)

    assert result.exit_code == 1
    assert result.stderr.strip() == "no agent is named 'nobody'"


AGENT = "  - name: {name}\n    model: openai/gpt-4o-mini\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            # Lines: 1 agents:, 2-3 agent 1, 4-5 agent 2, 6-7 agent 3 (no model), 8 agent 4.
            "agents:\n" + AGENT.format(name="a") + AGENT.format(name="b") + "  - name: c\n    tags: [x]\n"
            "  - {name: d, model: openai/gpt-4o-mini}\n",
            "agent 3 (line 6): 'model' is required",
        ),
        ("agents:\n  - name: a\n   model: openai/gpt-4o-mini\n", "line 3: not valid YAML ("),
        ("- name: a\n  model: openai/gpt-4o-mini\n- just a string\n", "agent 2 (line 3): expected a mapping"),
        ("agents:\n" + AGENT.format(name="a") + "    tags: travel\n", "agent 1 (line 4): 'tags': input should be"),
        (
            "agents:\n" + AGENT.format(name="a") + "    memory_blocks:\n      - {label: persona}\n",
            "agent 1 (line 5): 'memory_blocks[0].value' is required",
        ),
        ("agents:\n" + AGENT.format(name="a") + "    memroy_blocks: []\n",
         "agent 1 (line 4): 'memroy_blocks' is not a field of an agent (did you mean 'memory_blocks'?)"),
        ("agents:\n  - name: a\n    model: gpt-4o\n", "agent 1 (line 3): model must be 'provider/model-name'"),
        ("agents: {name: a}\n", "line 1: 'agents' must be a list, got a mapping"),
        ("tools:\n  - {description: x}\nagents:\n" + AGENT.format(name="a"), "tool 1 (line 2): give either"),
        ("", "the file is empty"),
    ],
    ids=["no-model", "not-yaml", "not-a-mapping", "wrong-type", "block-value", "typo", "handle", "not-a-list",
         "tool-source", "empty"],
)  # fmt: skip
def test_bad_agents_file(tmp_path: Path, server: str, api: httpx.Client, text: str, message: str) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(text)

    result = cli("agents", "create", "--from-file", str(path), server=server)

    assert result.exit_code == 1
    assert result.stderr.startswith(f"{path}: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert api.get("/v1/agents/").json() == []


def test_agents_file_the_server_refuses_creates_nothing(tmp_path: Path, server: str, api: httpx.Client) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text("agents:\n" + AGENT.format(name="a") + "  - {name: b, model: openai/gpt-4o-mini, tools: [nope]}\n")

    result = cli("agents", "create", "-f", str(path), server=server)

    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"{path}: agent 2 (line 4): unknown tools: nope"
        " (the agent created before it was deleted again; nothing was created)"
    )
    assert api.get("/v1/agents/").json() == []


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"agent_name": "odile-night-poet", "input": "hi"}', "", '{"agent_name": "x" "input": "hi"}'],
         "requests.jsonl:3: not JSON (Expecting ',' delimiter at column 20)"),
        (['{"agent_name": "odile-night-poet", "input": "hi"}', '{"input": "hi"}'],
         "requests.jsonl:2: 'agent_id' is required (or 'agent_name')"),
        (['{"agent_id": "agent-1"}'], "requests.jsonl:1: 'messages' or 'input' is required"),
        (['{"agent_id": "agent-1", "messages": [{"role": "bot", "content": "x"}]}'],
         "requests.jsonl:1: 'messages[0].role': input should be 'user' or 'system'"),
        (['["agent-1"]'], "requests.jsonl:1: expected a JSON object"),
        (['{"agent_name": "nobody", "input": "hi"}'], "requests.jsonl:1: no agent is named 'nobody'"),
        (['{"agent_name": "odile-night-poet", "input": "hi"}', '{"agent_name": "odile-night-poet", "input": "x"}'],
         "requests.jsonl:2: agent odile-night-poet already has a request on line 1"),
    ],
    ids=["not-json", "no-agent", "no-messages", "bad-role", "not-an-object", "unknown-name", "twice"],
)  # fmt: skip
def test_bad_requests_file(tmp_path: Path, server: str, api: httpx.Client, lines: list[str], message: str) -> None:
    create_examples(server)
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")

    result = cli("batch", "submit", str(path), server=server)

    assert result.exit_code == 1
    assert result.stderr.startswith(str(tmp_path / message)), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert api.get("/v1/messages/batches").json() == []


def test_bad_requests_on_stdin(server: str) -> None:
    result = cli("batch", "submit", "-", server=server, stdin='{"agent_id": "agent-1", "input": "hi"\n')

    assert result.exit_code == 1
    assert result.stderr.strip() == "<stdin>:1: not JSON (Expecting ',' delimiter at column 38)"


def test_api_key(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The module's server has a password; the password's organization is this test's alone.
    locked_server = base_url
    missing = cli("agents", "list", server=locked_server)
    wrong = cli("batch", "list", "--api-key", "nope", server=locked_server)
    given = cli("agents", "create", "-f", str(AGENTS_FILE), "--api-key", SERVER_PASSWORD, server=locked_server)
    monkeypatch.setenv("NIGHTSHIFT_API_KEY", SERVER_PASSWORD)
    from_env = cli("agents", "list", server=locked_server)

    assert missing.exit_code == 1
    assert missing.stderr.strip() == "the server needs an API key: pass --api-key or set NIGHTSHIFT_API_KEY"
    assert wrong.exit_code == 1
    assert wrong.stderr.strip() == "the server refused the API key: the API key or password is not valid"
    assert given.exit_code == 0, given.output
    assert from_env.exit_code == 0, from_env.output
    assert "4 agents" in from_env.stdout
