"""``nightshift.client`` against a real server (the module's, on SQLite then PostgreSQL) and the emulator.

Each test acts in an organization of its own (``api_key``); agents are made over plain HTTP, as a
user would with letta-client or curl, and everything else goes through the client.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightshift.client import (
    AsyncClient,
    AuthenticationError,
    BatchRequest,
    BatchRun,
    Client,
    Conflict,
    InvalidRequestsFile,
    NotFound,
    UnprocessableEntity,
)
from nightshift.client.types import BatchRunAgent, RunMessage
from nightshift.emulator import EmulatorAdmin

MODEL = "anthropic/claude-3-5-haiku-20241022"


@pytest.fixture
def client(base_url: str, api_key: str, emulator: str, tls_context: ssl.SSLContext) -> Iterator[Client]:
    # No retries: a failing call must fail the test at once (the retry tests ask for them).
    # The shared TLS context spares the transport reading the CA bundle again (see conftest.py).
    transport = httpx.HTTPTransport(verify=tls_context)
    with Client(base_url, api_key, timeout=60, max_retries=0, transport=transport) as made:
        yield made


def make_agents(http: httpx.Client, count: int, prefix: str = "clerk") -> list[str]:
    ids = []
    for i in range(count):
        response = http.post(
            "/v1/agents/",
            json={"name": f"{prefix}-{i}", "model": MODEL, "memory_blocks": [{"label": "human", "value": "?"}]},
        )
        assert response.status_code == 200, response.text
        ids.append(response.json()["id"])
    return ids


def configure_emulator(emulator: str, **fields: Any) -> None:
    async def configure() -> None:
        async with EmulatorAdmin(emulator) as admin:
            await admin.configure(**fields)

    asyncio.run(configure())


def test_a_run_of_100_agents_created_waited_for_and_read_per_agent(client: Client, http: httpx.Client) -> None:
    agent_ids = make_agents(http, 100)
    # Dicts and typed requests mix.
    requests: list[BatchRequest | dict[str, Any]] = [
        {"agent_id": a, "messages": [{"role": "user", "content": f"Hello, I am visitor {i}"}]}
        for i, a in enumerate(agent_ids[:50])
    ]
    requests += [BatchRequest(agent_id=a, input="Good evening", max_steps=3) for a in agent_ids[50:]]

    created = client.batches.create(requests, metadata={"team": "night"}, name="evening greetings")
    seen: list[BatchRun] = []
    run = client.batches.wait(created.id, poll_interval=0.05, timeout=100, on_progress=seen.append)

    assert created.status == "created"
    assert run.status == "completed"
    assert run.name == "evening greetings"
    assert run.metadata == {"team": "night", "name": "evening greetings"}
    assert run.progress.agents.finished == 100 and run.progress.agents.failed == 0
    assert run.progress.usage.output_tokens > 0 and run.progress.cost_usd > 0
    assert seen and seen[-1].id == run.id and seen[-1].is_final
    finished = [r.progress.agents.finished for r in seen]
    assert finished == sorted(finished) and finished[-1] == 100

    results = client.batches.results(run.id)
    assert sorted(r.agent_id for r in results) == sorted(agent_ids)
    for result in results:
        assert result.state == "finished", result
        assert result.final_message, result
        assert result.usage.total_tokens > 0 and result.cost_usd > 0
        assert result.error is None
        assert result.messages[0].role == "user"
        assert {m.agent_id for m in result.messages} == {result.agent_id}
    assert sum(r.cost_usd for r in results) == pytest.approx(run.progress.cost_usd, abs=1e-4)

    # Paging: every agent and message once, across pages smaller than the whole.
    agents = list(client.batches.agents(run.id, limit=7))
    assert sorted(a.agent_id for a in agents) == sorted(agent_ids)
    messages = list(client.batches.messages(run.id, limit=33))
    assert len(messages) == len({m.id for m in messages}) == sum(len(r.messages) for r in results) > 100
    newest_first = list(client.batches.messages(run.id, order="desc", limit=50))
    assert [m.id for m in newest_first] == [m.id for m in reversed(messages)]
    one = list(client.batches.messages(run.id, agent_id=agent_ids[3], limit=1))
    (third,) = [r for r in results if r.agent_id == agent_ids[3]]
    assert [m.id for m in one] == [m.id for m in third.messages] and len(one) > 1

    # What the server sends has no field the client's models do not name (the drift test checks
    # the models against the OpenAPI schema; this checks the answers against the models).
    raw_run = http.get(f"/v1/messages/batches/{run.id}").json()
    assert _unknown(raw_run, BatchRun) == set()
    raw_agent = http.get(f"/v1/messages/batches/{run.id}/agents", params={"limit": 1}).json()["agents"][0]
    assert _unknown(raw_agent, BatchRunAgent) == set()
    raw_message = http.get(f"/v1/messages/batches/{run.id}/messages", params={"limit": 1}).json()["messages"][0]
    assert _unknown(raw_message, RunMessage) == set()


def _unknown(body: dict[str, Any], model: type[Any]) -> set[str]:
    return set(body) - set(model.model_fields)


def test_lists_page_through_every_run_once(client: Client, http: httpx.Client) -> None:
    agent_ids = make_agents(http, 5)
    made = [client.batches.create([{"agent_id": a, "input": "hi"}]).id for a in agent_ids]
    for run_id in made:
        client.batches.wait(run_id, poll_interval=0.05, timeout=60)

    newest_first = [run.id for run in client.batches.list(limit=2)]
    oldest_first = [run.id for run in client.batches.list(order="asc", limit=2)]
    completed = [run.id for run in client.batches.list(status="completed", limit=3)]
    failing = list(client.batches.list(has_failures=True, limit=2))
    runs = [run.id for run in client.runs.list(limit=2) if run.id.startswith("batch-")]

    assert newest_first == made[::-1]
    assert oldest_first == made
    assert sorted(completed) == sorted(made)
    assert failing == []
    assert sorted(runs) == sorted(made)
    letta_run = client.runs.retrieve(made[0])
    assert letta_run.metadata["kind"] == "batch" and letta_run.background
    usage = client.runs.usage(made[0])
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    assert list(client.runs.steps(made[0])) == []


def test_a_run_from_a_json_lines_file_with_agent_names(client: Client, http: httpx.Client, tmp_path: Path) -> None:
    first, second = make_agents(http, 2, prefix="poet")
    path = tmp_path / "requests.jsonl"
    path.write_text(
        json.dumps({"agent_name": "poet-0", "input": "A haiku, please"})
        + "\n\n"
        + json.dumps({"agent_id": second, "messages": [{"role": "user", "content": "A limerick"}]})
        + "\n"
    )
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps([{"agent_id": first, "input": "x"}], indent=2))
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"agent_name": "nobody", "input": "x"}) + "\n")

    run = client.batches.create_from_file(path, name="verses")
    with pytest.raises(InvalidRequestsFile) as spread:
        client.batches.create_from_file(pretty)
    with pytest.raises(InvalidRequestsFile) as nobody:
        client.batches.create_from_file(unknown)

    ended = client.batches.wait(run.id, poll_interval=0.05, timeout=60)
    assert ended.status == "completed" and ended.name == "verses"
    assert sorted(a.agent_id for a in client.batches.agents(run.id)) == sorted([first, second])
    assert spread.value.message.startswith(f"{pretty}:1: a JSON value spread over several lines")
    assert "one JSON object per line" in spread.value.message
    assert nobody.value.message == f"{unknown}:1: no agent is named 'nobody'"
    assert [r.id for r in client.batches.list()] == [run.id]


def test_the_same_idempotency_key_gives_the_same_run(client: Client, http: httpx.Client) -> None:
    (agent_id,) = make_agents(http, 1)
    key = f"evening-{uuid.uuid4()}"

    first = client.batches.create([{"agent_id": agent_id, "input": "hi"}], idempotency_key=key)
    again = client.batches.create([{"agent_id": agent_id, "input": "hi"}], idempotency_key=key)

    assert again.id == first.id
    assert [run.id for run in client.batches.list()] == [first.id]


class LosesTheFirstAnswer(httpx.HTTPTransport):
    """Sends every request for real, but loses the answer to the first POST, as a dropped
    connection would after the server did the work."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and self.lost == 0:
            response.read()
            response.close()
            self.lost += 1
            raise httpx.ReadError("the connection dropped before the answer", request=request)
        return response


def test_a_create_retried_after_a_dropped_connection_makes_one_run(
    base_url: str, api_key: str, emulator: str, http: httpx.Client
) -> None:
    (agent_id,) = make_agents(http, 1)
    transport = LosesTheFirstAnswer()

    with Client(base_url, api_key, max_retries=2, transport=transport) as client:
        run = client.batches.create([{"agent_id": agent_id, "input": "hi"}], name="once")
        listed = [r.id for r in client.batches.list()]

    assert transport.lost == 1
    assert listed == [run.id]
    assert run.name == "once"


def test_errors_carry_the_servers_message(client: Client, http: httpx.Client, emulator: str, base_url: str) -> None:
    (agent_id,) = make_agents(http, 1)
    configure_emulator(emulator, polls_to_end=1000)
    open_run = client.batches.create([{"agent_id": agent_id, "input": "hi"}])

    with pytest.raises(NotFound) as not_found:
        client.batches.retrieve("batch-nope")
    while client.batches.retrieve(open_run.id).status == "created":  # until its step 0 is written
        time.sleep(0.02)
    with pytest.raises(Conflict) as conflict:
        # In the open run's step: the server refuses a second run for it.
        client.batches.create([{"agent_id": agent_id, "input": "again"}])
    with pytest.raises(UnprocessableEntity) as invalid:
        client.batches.create([{"agent_id": agent_id, "messages": [{"role": "bot", "content": "x"}]}])
    with pytest.raises(AuthenticationError) as refused, Client(base_url, "not-a-key", max_retries=0) as stranger:
        stranger.batches.retrieve(open_run.id)

    assert not_found.value.status_code == 404
    assert not_found.value.message == "batch run batch-nope not found"
    assert conflict.value.status_code == 409
    assert agent_id in conflict.value.message
    assert invalid.value.status_code == 422
    assert "requests.0.messages.0.role" in invalid.value.message
    assert invalid.value.body["field"] == "requests.0.messages.0.role"
    assert refused.value.status_code == 401
    client.batches.cancel(open_run.id)
    assert client.batches.retrieve(open_run.id).status == "cancelled"


async def test_the_async_client_on_the_main_path(
    base_url: str, api_key: str, emulator: str, http: httpx.Client
) -> None:
    agent_ids = make_agents(http, 5, prefix="owl")
    seen: list[BatchRun] = []

    async with AsyncClient(base_url, api_key, max_retries=0) as client:
        created = await client.batches.create(
            [BatchRequest(agent_id=a, input="Who goes there?") for a in agent_ids], name="night watch"
        )
        run = await client.batches.wait(created.id, poll_interval=0.05, timeout=60, on_progress=seen.append)
        results = await client.batches.results(run.id)
        listed = [r.id async for r in client.batches.list(limit=1)]
        agents = [a.agent_id async for a in client.batches.agents(run.id, limit=2)]
        runs = [r.id async for r in client.runs.list(limit=1)]
        key = await client.keys.create(name="owl-key")
        keys = {k.id: k.status for k in await client.keys.list()}
        revoked = await client.keys.revoke(key.id)

    assert run.status == "completed" and run.name == "night watch"
    assert seen[-1].is_final
    assert sorted(r.agent_id for r in results) == sorted(agent_ids)
    assert all(r.state == "finished" and r.final_message and r.cost_usd > 0 for r in results)
    assert listed == [run.id] and runs == [run.id]
    assert sorted(agents) == sorted(agent_ids)
    assert key.key.startswith("ns-") and keys[key.id] == "active"
    assert revoked.status == "revoked" and revoked.revoked_at is not None


def test_sleeptime_runs_through_the_client_listed_by_kind_and_costed_apart(client: Client, http: httpx.Client) -> None:
    made = http.post("/v1/agents/", json={"name": "lark", "model": MODEL, "enable_sleeptime": True})
    main_id = made.raise_for_status().json()["id"]
    assert client.sleeptime.run() == []  # nothing due, nothing said yet
    main_run = client.batches.wait(
        client.batches.create([BatchRequest(agent_id=main_id, input="I like plums.")]).id,
        poll_interval=0.05,
        timeout=60,
    )
    assert main_run.kind == "main"

    (queued,) = client.sleeptime.run(all=True)
    done = client.batches.wait(queued.id, poll_interval=0.05, timeout=60)

    assert queued.kind == done.kind == "sleeptime" and done.status == "completed"
    assert [r.id for r in client.batches.list(kind="sleeptime")] == [queued.id]
    assert [r.id for r in client.batches.list(kind="main")] == [main_run.id]
    costs = client.batches.costs()
    for kind, run in (("main", main_run), ("sleeptime", done)):
        found = costs.of(kind)
        assert found is not None and found.runs == 1 and found.cost_usd > 0
        assert found.cost_usd == pytest.approx(run.progress.cost_usd, abs=1e-6)
        assert found.cost_without_batch_usd == pytest.approx(run.progress.cost_without_batch_usd, abs=1e-6)
    # Both runs' batches ended: too few for a spread, counted (the organization is the test's own).
    seen = client.batches.turnaround()
    (turnaround,), (by_model,) = seen.providers, seen.models
    assert (turnaround.provider, turnaround.ended, turnaround.p50_seconds) == ("anthropic", 2, None)
    assert (by_model.provider, by_model.model, by_model.ended) == ("anthropic", MODEL.split("/", 1)[1], 2)


async def test_the_async_client_runs_sleeptime_agents_and_reads_costs(
    base_url: str, api_key: str, emulator: str, http: httpx.Client
) -> None:
    made = http.post("/v1/agents/", json={"name": "wren", "model": MODEL, "enable_sleeptime": True})
    main_id = made.raise_for_status().json()["id"]
    async with AsyncClient(base_url, api_key, max_retries=0) as client:
        nothing = await client.sleeptime.run(all=True)
        created = await client.batches.create([BatchRequest(agent_id=main_id, input="Night falls.")])
        await client.batches.wait(created.id, poll_interval=0.05, timeout=60)
        (queued,) = await client.sleeptime.run(all=True)
        await client.batches.wait(queued.id, poll_interval=0.05, timeout=60)
        listed = [r.id async for r in client.batches.list(kind="sleeptime")]
        costs = await client.batches.costs()
        turnaround = await client.batches.turnaround()

    assert [(t.provider, t.ended) for t in turnaround.providers] == [("anthropic", 2)]
    assert nothing == [] and queued.kind == "sleeptime" and listed == [queued.id]
    assert [(k.kind, k.runs) for k in costs.kinds] == [("main", 1), ("sleeptime", 1)]
