"""Hostile and careless input through HTTP, on SQLite and PostgreSQL: always a clear 4xx, never a 5xx.

Each refusal is a JSON error body (``detail``, and ``field`` when one part is at fault), and a
refused request writes nothing. The client raises on any unexpected server error (httpx's ASGI
transport re-raises it), so a 500 fails these tests loudly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from nightshift.api.app import create_app
from nightshift.batch.steps import MAX_INPUT_BYTES
from nightshift.config import Settings
from nightshift.domain.limits import (
    DEFAULT_MAX_REQUEST_MB,
    MAX_BATCH_REQUEST_MB,
    MAX_BATCH_REQUEST_VALUES,
    MAX_MESSAGE_CHARS,
    MAX_SOURCE_CHARS,
    MAX_TEXT_CHARS,
)
from support.agent_files import SCREENING, document, double_encoded
from support.api import BASE_TOOL_NAMES, MEMGPT, json_object
from support.databases import sqlite_only

MODEL = "anthropic/claude-3-5-haiku-20241022"
TOOL = '''
def lookup(term: str) -> str:
    """Look a term up in the glossary.

    Args:
        term: The term to look up.
    """
    return term.upper()
'''
JSON = {"content-type": "application/json"}


def refused(response: httpx.Response, status: int = 422, *, field: str | None = None, says: str = "") -> str:
    """Check a refusal: the status, a JSON body that says what is wrong (and where), no stack trace."""
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in response.text
    if field is not None:
        assert body["field"] == field, body
    assert says in body["detail"], body
    return str(body["detail"])


async def nothing_written(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/agents/")).json() == []
    assert (await client.get("/v1/blocks/")).json() == []
    assert {t["name"] for t in (await client.get("/v1/tools/")).json()} <= BASE_TOOL_NAMES
    assert (await client.get("/v1/messages/batches")).json() == []


async def new_agent(client: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    return json_object(
        await client.post("/v1/agents/", json={"name": "ada", "model": MODEL, "agent_type": MEMGPT, **extra})
    )


# --- 1. credentials -------------------------------------------------------------------------------

PASSWORD = "pässwörd-ünïcode"


@pytest.fixture
async def password_app(tmp_path: Path, db_url: str) -> AsyncIterator[FastAPI]:
    settings = Settings(
        home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, server_password=PASSWORD
    )
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


async def test_a_non_ascii_bearer_token_is_a_401_and_a_non_ascii_password_works(password_app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=password_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
        # httpx sends str headers as ASCII only: bytes go on the wire as they are.
        for token in ("Bearer é".encode(), "Bearer \u2603 snowman".encode(), b"Bearer \xff\xfe"):
            response = await client.get("/v1/agents/", headers={b"authorization": token})
            refused(response, 401, says="not valid")
            assert response.headers["www-authenticate"] == "Bearer"
        for header in ("x-api-key", "user-id-token"):
            refused(await client.get("/v1/agents/", headers={header.encode(): "ключ".encode()}), 401)
        # The right password, sent as UTF-8, is let in.
        ok = await client.get("/v1/agents/", headers={b"authorization": f"Bearer {PASSWORD}".encode()})
        assert ok.status_code == 200, ok.text
        # The connection still works after the refusals (no 500 dropped it).
        assert (await client.get("/v1/health")).status_code == 200


async def test_a_non_ascii_api_key_without_a_password_is_a_401(client: httpx.AsyncClient) -> None:
    refused(await client.get("/v1/agents/", headers={b"authorization": "Bearer é".encode()}), 401)


# --- 2. integers out of range --------------------------------------------------------------------

HUGE = 10**30


INTEGERS: list[tuple[str, str, Any, str]] = [
    ("GET", f"/v1/agents/?limit={HUGE}", None, "query.limit"),
    ("GET", f"/v1/tools/?limit={HUGE}", None, "query.limit"),
    ("GET", f"/v1/blocks/?limit={-HUGE}", None, "query.limit"),
    ("GET", f"/v1/messages/batches?limit={HUGE}", None, "query.limit"),
    ("POST", "/v1/agents/", {"model": MODEL, "max_tokens": 10**20}, "max_tokens"),
    ("POST", "/v1/agents/", {"model": MODEL, "context_window_limit": 10**20}, "context_window_limit"),
    ("POST", "/v1/agents/", {"llm_config": {"model": MODEL, "context_window": 2**40}}, "llm_config.context_window"),
    ("POST", "/v1/agents/", {"llm_config": {"model": MODEL, "max_tokens": 2**31}}, "llm_config.max_tokens"),
    (
        "POST",
        "/v1/agents/",
        {"model": MODEL, "memory_blocks": [{"label": "a", "value": "b", "limit": 2**40}]},
        "memory_blocks.0.limit",
    ),
    ("POST", "/v1/agents/", {"model": MODEL, "metadata": {"n": HUGE}}, "metadata.n"),
    ("POST", "/v1/agents/", {"model": MODEL, "metadata": {"deep": [{"n": -HUGE}]}}, "metadata.deep.0.n"),
    (
        "POST",
        "/v1/agents/",
        {"model": MODEL, "tool_rules": [{"type": "max_count_per_step", "tool_name": "x", "max_count_limit": HUGE}]},
        "tool_rules.0.max_count_limit",
    ),
    ("POST", "/v1/blocks/", {"label": "a", "value": "b", "limit": 10**20}, "limit"),
    ("POST", "/v1/tools/", {"source_code": TOOL, "return_char_limit": 10**20}, "return_char_limit"),
    ("POST", "/v1/agents/agent-x/messages", {"input": "hi", "max_steps": 10**20}, "max_steps"),
    (
        "POST",
        "/v1/messages/batches",
        {"requests": [{"agent_id": "a", "input": "hi", "max_steps": HUGE}]},
        "requests.0.max_steps",
    ),
    (
        "POST",
        "/v1/messages/batches",
        {"requests": [{"agent_id": "a", "input": "hi"}], "metadata": {"n": HUGE}},
        "metadata.n",
    ),
]


async def test_integers_out_of_range_are_422_naming_the_field(client: httpx.AsyncClient) -> None:
    for method, path, body, field in INTEGERS:
        refused(await client.request(method, path, json=body), field=field)
    await nothing_written(client)


async def test_changes_with_integers_out_of_range_are_422(client: httpx.AsyncClient) -> None:
    agent = await new_agent(client, memory_blocks=[{"label": "human", "value": "x"}])
    refused(await client.patch(f"/v1/agents/{agent['id']}", json={"max_tokens": 10**20}), field="max_tokens")
    refused(
        await client.patch(f"/v1/agents/{agent['id']}/core-memory/blocks/human", json={"limit": 2**31}), field="limit"
    )
    block = agent["blocks"][0]["id"]
    refused(await client.patch(f"/v1/blocks/{block}", json={"limit": HUGE}), field="limit")
    assert (await client.get(f"/v1/agents/{agent['id']}")).json()["llm_config"] == agent["llm_config"]


@sqlite_only
async def test_a_rule_count_over_the_step_limit_is_422(client: httpx.AsyncClient) -> None:
    rules = [{"type": "max_count_per_step", "tool_name": "send_message", "max_count_limit": 5000}]
    refused(await client.post("/v1/agents/", json={"model": MODEL, "tool_rules": rules}), field="tool_rules")


# --- 3 and 4. lone surrogates and NUL characters ------------------------------------------------

NUL = "a\u0000b"


def _nul_bodies() -> list[tuple[str, str, Any, str | None]]:
    """(method, path, body, field) with a NUL character in every kind of place input enters."""
    return [
        ("POST", "/v1/agents/", {"model": MODEL, "name": NUL}, "name"),
        ("POST", "/v1/agents/", {"model": MODEL, "system": NUL}, "system"),
        ("POST", "/v1/agents/", {"model": MODEL, "description": NUL}, "description"),
        ("POST", "/v1/agents/", {"model": f"anthropic/{NUL}"}, "model"),
        ("POST", "/v1/agents/", {"model": MODEL, "tags": ["ok", NUL]}, "tags.1"),
        ("POST", "/v1/agents/", {"model": MODEL, "metadata": {"a": {"b": [1, NUL]}}}, "metadata.a.b.1"),
        ("POST", "/v1/agents/", {"model": MODEL, "metadata": {NUL: 1}}, "metadata.'a\\x00b'"),
        ("POST", "/v1/agents/", {"model": MODEL, "memory_blocks": [{"label": NUL, "value": "v"}]}, None),
        ("POST", "/v1/agents/", {"model": MODEL, "memory_blocks": [{"label": "l", "value": NUL}]}, None),
        ("POST", "/v1/agents/", {"model": MODEL, "tool_rules": [{"type": "exit_loop", "tool_name": NUL}]}, None),
        ("POST", "/v1/agents/", {"model": MODEL, "secrets": {"KEY": NUL}}, "secrets.KEY"),
        ("POST", "/v1/agents/", {"model": MODEL, "block_ids": [NUL]}, "block_ids.0"),
        ("POST", "/v1/blocks/", {"label": "l", "value": NUL}, "value"),
        ("POST", "/v1/blocks/", {"label": NUL, "value": "v"}, "label"),
        ("POST", "/v1/blocks/", {"label": "l", "value": "v", "metadata": {"k": NUL}}, "metadata.k"),
        ("POST", "/v1/tools/", {"source_code": TOOL + f"\n# {NUL}\n"}, "source_code"),
        ("POST", "/v1/tools/", {"source_code": TOOL, "tags": [NUL]}, "tags.0"),
        ("POST", "/v1/tools/", {"source_code": TOOL, "description": NUL}, "description"),
        ("PUT", "/v1/tools/", {"source_code": TOOL, "json_schema": {"parameters": {"type": "object"}, "x": NUL}}, None),
        ("POST", "/v1/messages/batches", {"requests": [{"agent_id": "a", "input": NUL}]}, "requests.0.input"),
        ("POST", "/v1/messages/batches", {"requests": [{"agent_id": NUL, "input": "hi"}]}, "requests.0.agent_id"),
        ("POST", "/v1/messages/batches", {"requests": [{"agent_id": "a", "input": "x"}], "metadata": {"m": NUL}}, None),
        ("GET", "/v1/agents/?name=a%00b", None, "query.name"),
        ("GET", "/v1/agents/?tags=a%00b", None, "query.tags"),
        ("GET", "/v1/agents/?after=agent-%00", None, "query.after"),
        ("GET", "/v1/agents/agent-%00", None, "path.agent_id"),
        ("DELETE", "/v1/agents/agent-%00", None, "path.agent_id"),
        ("GET", "/v1/tools/?name=a%00b", None, "query.name"),
        ("GET", "/v1/tools/tool-%00", None, "path.tool_id"),
        ("GET", "/v1/blocks/?label=a%00b", None, "query.label"),
        ("GET", "/v1/blocks/block-%00/agents", None, "path.block_id"),
        ("GET", "/v1/messages/batches/batch-%00", None, "path.run_id"),
        ("GET", "/v1/messages/batches/batch-x/messages?agent_id=%00", None, "query.agent_id"),
    ]


def padded(body: Any) -> Any:
    """``body`` made large with a field nightshift ignores: a large body is walked on a thread."""
    return {**body, "padding_ignored": "p" * 20_000} if isinstance(body, dict) else body


async def test_a_nul_character_anywhere_is_422_on_both_databases(client: httpx.AsyncClient) -> None:
    for method, path, body, field in _nul_bodies():
        for sent in (body, padded(body)):
            response = await client.request(method, path, json=sent)
            detail = refused(response, says="NUL character")
            if field is not None:
                assert response.json()["field"] == field, response.text
            assert "\\u0000" in detail
    await nothing_written(client)


async def test_a_nul_character_in_changes_and_messages_to_an_agent_is_422(client: httpx.AsyncClient) -> None:
    agent = await new_agent(client, memory_blocks=[{"label": "human", "value": "x"}])
    block_id = agent["blocks"][0]["id"]
    tool = (await client.post("/v1/tools/", json={"source_code": TOOL})).json()
    attempts = [
        ("PATCH", f"/v1/agents/{agent['id']}", {"name": NUL}, "name"),
        ("PATCH", f"/v1/agents/{agent['id']}", {"system": NUL}, "system"),
        ("PATCH", f"/v1/agents/{agent['id']}", {"tags": [NUL]}, "tags.0"),
        ("PATCH", f"/v1/agents/{agent['id']}", {"metadata": {"x": [[NUL]]}}, "metadata.x.0.0"),
        ("PATCH", f"/v1/agents/{agent['id']}/core-memory/blocks/human", {"value": NUL}, "value"),
        ("PATCH", f"/v1/agents/{agent['id']}/core-memory/blocks/a%00", {"value": "v"}, "path.label"),
        ("PATCH", f"/v1/blocks/{block_id}", {"label": NUL}, "label"),
        ("PATCH", f"/v1/tools/{tool['id']}", {"description": NUL}, "description"),
        ("POST", f"/v1/agents/{agent['id']}/messages", {"messages": [{"role": "user", "content": NUL}]}, None),
        ("POST", f"/v1/agents/{agent['id']}/messages", {"input": [{"type": "text", "text": NUL}]}, "input.0.text"),
        ("POST", "/v1/messages/batches", {"requests": [{"agent_id": agent["id"], "input": NUL}]}, None),
    ]
    for method, path, body, field in attempts:
        response = await client.request(method, path, json=body)
        refused(response, says="NUL character")
        if field is not None:
            assert response.json()["field"] == field, (path, response.text)
    assert (await client.get(f"/v1/agents/{agent['id']}")).json()["name"] == "ada"
    assert (await client.get(f"/v1/blocks/{block_id}")).json()["value"] == "x"
    assert (await client.get(f"/v1/agents/{agent['id']}/messages")).json()[0]["message_type"] == "user_message"
    assert (await client.get("/v1/messages/batches")).json() == []


LONE = "a\ud800b"  # a lone high surrogate: json.dumps writes it as the escape \ud800


LONE_BODIES: list[tuple[str, Any]] = [
    ("/v1/agents/", {"model": MODEL, "name": LONE}),
    ("/v1/agents/", {"model": MODEL, "metadata": {"a": [LONE]}}),
    ("/v1/agents/", {"model": MODEL, "metadata": {LONE: 1}}),
    ("/v1/agents/", {"model": MODEL, "tags": [LONE]}),
    ("/v1/agents/", {"model": MODEL, "secrets": {"KEY": "\udfff"}}),
    ("/v1/blocks/", {"label": "l", "value": LONE}),
    ("/v1/tools/", {"source_code": TOOL.replace("glossary", LONE)}),
    ("/v1/messages/batches", {"requests": [{"agent_id": "a", "messages": [{"content": LONE}]}]}),
    ("/v1/messages/batches", {"requests": [{"agent_id": "a", "input": "x"}], "metadata": {"k": LONE}}),
]


async def test_a_lone_surrogate_anywhere_is_422(client: httpx.AsyncClient) -> None:
    for path, body in LONE_BODIES:
        for sent in (body, padded(body)):
            response = await client.post(path, content=json.dumps(sent).encode(), headers=JSON)
            refused(response)
            assert response.json()["field"], response.text
    await nothing_written(client)
    # A field nightshift does not read is dropped, surrogate and all (in a large body too).
    for ignored in ({"model": MODEL, "ignored_field": LONE}, padded({"model": MODEL, "ignored_field": LONE})):
        response = await client.post("/v1/agents/", content=json.dumps(ignored).encode(), headers=JSON)
        assert response.status_code == 200, response.text


@sqlite_only
async def test_bodies_that_are_not_utf8_or_nest_too_deep_are_422(client: httpx.AsyncClient) -> None:
    refused(await client.post("/v1/agents/", content=b'{"model": "\xff"}', headers=JSON), field="body", says="UTF-8")
    deep = ("[" * 5000 + "]" * 5000).encode()
    refused(await client.post("/v1/agents/", content=deep, headers=JSON), field="body", says="nested")
    nested: Any = []
    for _ in range(200):
        nested = [nested]
    for sent in ({"model": MODEL, "metadata": {"a": nested}}, padded({"model": MODEL, "metadata": {"a": nested}})):
        refused(await client.post("/v1/agents/", content=json.dumps(sent).encode(), headers=JSON), says="nested")
    for number in (float("nan"), float("inf"), float("-inf")):
        for sent in ({"model": MODEL, "metadata": {"x": number}}, padded({"model": MODEL, "metadata": {"x": number}})):
            body = json.dumps(sent)  # NaN, Infinity: not JSON, Python writes them
            refused(await client.post("/v1/agents/", content=body.encode(), headers=JSON), field="metadata.x")
    await nothing_written(client)


# --- 5. tool source that breaks the parser --------------------------------------------------------


def _tool_with_default(default: str) -> str:
    return (
        f'def f(x: int = {default}) -> str:\n    """Do it.\n\n    Args:\n        x: A number.\n    """\n    return ""\n'
    )


TOO_DEEP = [
    _tool_with_default("-" * 100_000 + "1"),
    _tool_with_default("+".join(["1"] * 50_000)),
    _tool_with_default("(" * 300 + "1" + ")" * 300),
    'def f(x: "'
    + "list[" * 190
    + "int"
    + "]" * 190
    + '") -> str:\n    """Do it.\n\n    Args:\n        x: y\n    """\n',
]


@sqlite_only
async def test_tool_source_too_deep_to_parse_is_422(client: httpx.AsyncClient) -> None:
    # 100,000 minus signs (MemoryError in the parser), 50,000 + terms (RecursionError), and deep nesting.
    for source in TOO_DEEP:
        refused(await client.post("/v1/tools/", json={"source_code": source}), field="source_code")
    await nothing_written(client)


async def test_tool_source_over_the_size_limit_is_422(client: httpx.AsyncClient) -> None:
    source = TOOL + "#" * (MAX_SOURCE_CHARS - len(TOOL) + 1)
    refused(await client.post("/v1/tools/", json={"source_code": source}), field="source_code", says="at most")
    created = await client.post("/v1/tools/", json={"source_code": source[:MAX_SOURCE_CHARS]})
    assert created.status_code == 200, created.text[:300]


@pytest.fixture
async def quick_read_app(tmp_path: Path, db_url: str) -> AsyncIterator[FastAPI]:
    """The app giving a tool's source 1 s to be read (``NIGHTSHIFT_TOOL_READ_SECONDS=1``)."""
    settings = Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, tool_read_seconds=1)
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


async def test_a_tool_source_that_reads_too_long_is_422_once_its_time_is_up(quick_read_app: FastAPI) -> None:
    # One f-string of 100,000 fields: its parse takes seconds (time quadratic in the fields).
    slow = TOOL.replace("return term.upper()", 'return f"' + "{term}" * 100_000 + '"')
    transport = httpx.ASGITransport(app=quick_read_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
        for method in ("POST", "PUT"):
            response = await client.request(method, "/v1/tools/", json={"source_code": slow})
            refused(response, field="source_code", says="took longer than 1 s (NIGHTSHIFT_TOOL_READ_SECONDS)")
        created = json_object(await client.post("/v1/tools/", json={"source_code": TOOL}))
        changed = await client.patch(f"/v1/tools/{created['id']}", json={"source_code": slow})
        refused(changed, field="source_code", says="took longer than 1 s")
        assert json_object(await client.get(f"/v1/tools/{created['id']}"))["source_code"] == TOOL
        await nothing_written_but(client, "lookup")


async def test_an_agent_file_tool_source_that_reads_too_long_is_422_and_imports_nothing(
    quick_read_app: FastAPI,
) -> None:
    doc = document(SCREENING)
    tool = next(t for t in doc["tools"] if t["name"] == "decline")
    tool["source_code"] = tool["source_code"].replace(
        'return f"declined {applicant}"', 'a = applicant\n    return f"' + "{a}" * 100_000 + '"'
    )
    transport = httpx.ASGITransport(app=quick_read_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
        response = await client.post("/v1/agents/import", files={"file": ("slow.af", double_encoded(doc))})
        refused(response, field="file", says="took longer than 1 s (NIGHTSHIFT_TOOL_READ_SECONDS)")
        await nothing_written(client)


async def nothing_written_but(client: httpx.AsyncClient, tool: str) -> None:
    assert {t["name"] for t in (await client.get("/v1/tools/")).json()} == BASE_TOOL_NAMES | {tool}


async def test_tool_names_must_suit_the_providers(client: httpx.AsyncClient) -> None:
    for name, says in [("café", "ASCII"), ("a" * 65, "1 to 64"), ("ß", "ASCII")]:
        source = TOOL.replace("def lookup", f"def {name}")
        refused(await client.post("/v1/tools/", json={"source_code": source}), field="source_code", says=says)
    ok = await client.post("/v1/tools/", json={"source_code": TOOL.replace("def lookup", f"def {'a' * 64}")})
    assert ok.status_code == 200, ok.text


# --- 6. a client's json_schema --------------------------------------------------------------------

GOOD_SCHEMA = {
    "name": "lookup",
    "description": "Look a term up (client's words).",
    "parameters": {
        "type": "object",
        "properties": {"term": {"type": "string", "description": "The term.", "minLength": 1}},
        "required": ["term"],
    },
}


BAD_SCHEMAS: list[tuple[dict[str, Any], str, str]] = [
    ({"parameters": "notadict", "name": 5}, "json_schema.name", "tool name"),
    ({**GOOD_SCHEMA, "name": "has space"}, "json_schema.name", "tool name"),
    ({**GOOD_SCHEMA, "name": "other_name"}, "json_schema.name", "function"),
    ({**GOOD_SCHEMA, "description": ["not", "text"]}, "json_schema.description", "text"),
    ({"name": "lookup"}, "json_schema.parameters", "type object"),
    ({"name": "lookup", "parameters": "notadict"}, "json_schema.parameters", "type object"),
    ({"name": "lookup", "parameters": {"type": "string"}}, "json_schema.parameters", "type object"),
    (
        {"name": "lookup", "parameters": {"type": "object", "properties": {"a": {"type": "nonsense"}}}},
        "json_schema.parameters",
        "properties.a.type",
    ),
    (
        {"name": "lookup", "parameters": {"type": "object", "properties": []}},
        "json_schema.parameters",
        "not a valid JSON Schema",
    ),
    (
        {"name": "lookup", "parameters": {"type": "object", "required": "term"}},
        "json_schema.parameters",
        "not a valid JSON Schema",
    ),
]


@sqlite_only
async def test_a_malformed_client_json_schema_is_422(client: httpx.AsyncClient) -> None:
    for schema, field, says in BAD_SCHEMAS:
        for method in ("POST", "PUT"):
            response = await client.request(method, "/v1/tools/", json={"source_code": TOOL, "json_schema": schema})
            refused(response, field=field, says=says)
    await nothing_written(client)


async def test_a_client_schema_of_more_than_10000_values_is_422(client: httpx.AsyncClient) -> None:
    properties = {f"p{i}": {"type": "string", "description": "x"} for i in range(3334)}  # 3 values each
    huge = {"name": "lookup", "parameters": {"type": "object", "properties": properties}}
    response = await client.post("/v1/tools/", json={"source_code": TOOL, "json_schema": huge})
    refused(response, field="json_schema", says="more than 10,000 values")
    model = {"type": "object", "properties": properties}
    source = TOOL.replace("term: str", "**fields: str")
    response = await client.post("/v1/tools/", json={"source_code": source, "args_json_schema": model})
    refused(response, field="args_json_schema", says="more than 10,000 values")
    await nothing_written(client)
    # Within the limit, the same schema is taken.
    del properties["p0"], properties["p1"], properties["p2"], properties["p3"]
    taken = await client.post("/v1/tools/", json={"source_code": TOOL, "json_schema": huge})
    assert taken.status_code == 200, taken.text[:300]


async def test_a_valid_client_json_schema_replaces_the_generated_one(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/tools/", json={"source_code": TOOL, "json_schema": GOOD_SCHEMA})
    assert created.status_code == 200, created.text
    assert created.json()["json_schema"] == GOOD_SCHEMA
    nameless = {k: v for k, v in GOOD_SCHEMA.items() if k != "name"}
    replaced = await client.put("/v1/tools/", json={"source_code": TOOL, "json_schema": nameless})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["json_schema"]["name"] == "lookup"


# --- 7. size limits -------------------------------------------------------------------------------


OVERSIZED: list[tuple[str, str, Any, str]] = [
    ("POST", "/v1/agents/", {"model": MODEL, "name": "n" * 256}, "name"),
    ("POST", "/v1/agents/", {"model": MODEL, "system": "s" * (MAX_TEXT_CHARS + 1)}, "system"),
    ("POST", "/v1/agents/", {"model": MODEL, "tags": [f"t{i}" for i in range(101)]}, "tags"),
    ("POST", "/v1/agents/", {"model": MODEL, "tags": ["t" * 256]}, "tags.0"),
    ("POST", "/v1/agents/", {"model": MODEL, "embedding": "e" * 256}, "embedding"),
    ("POST", "/v1/agents/", {"model": MODEL, "tool_ids": [f"tool-{i}" for i in range(1001)]}, "tool_ids"),
    (
        "POST",
        "/v1/agents/",
        {"model": MODEL, "memory_blocks": [{"label": "l" * 256, "value": ""}]},
        "memory_blocks.0.label",
    ),
    ("POST", "/v1/blocks/", {"label": "l" * 256, "value": "v"}, "label"),
    ("POST", "/v1/blocks/", {"label": "l", "value": "v" * (MAX_TEXT_CHARS + 1)}, "value"),
    ("POST", "/v1/tools/", {"source_code": TOOL, "tags": ["t"] * 101}, "tags"),
    ("GET", "/v1/agents/?" + "&".join(f"tags=t{i}" for i in range(101)), None, "query.tags"),
]


@sqlite_only
async def test_sizes_over_the_limits_are_422(client: httpx.AsyncClient) -> None:
    for method, path, body, field in OVERSIZED:
        refused(await client.request(method, path, json=body), field=field)
    await nothing_written(client)


async def test_the_limits_themselves_are_accepted(client: httpx.AsyncClient) -> None:
    agent = await new_agent(
        client,
        name="n" * 255,
        tags=[f"{i:03d}" + "t" * 252 for i in range(100)],
        memory_blocks=[{"label": "l" * 255, "value": "v" * 1000, "limit": MAX_TEXT_CHARS}],
    )
    assert len(agent["tags"]) == 100
    assert agent["blocks"][0]["limit"] == MAX_TEXT_CHARS


async def test_the_message_text_of_a_synchronous_request_is_limited(client: httpx.AsyncClient) -> None:
    agent = await new_agent(client)
    half = "m" * (MAX_MESSAGE_CHARS // 2 + 1)
    body = {"messages": [{"role": "user", "content": half}, {"role": "user", "content": half}]}
    refused(await client.post(f"/v1/agents/{agent['id']}/messages", json=body), field="messages", says="at most")
    assert len((await client.get(f"/v1/agents/{agent['id']}/messages")).json()) == 5  # the first messages only


@pytest.fixture
async def small_body_app(tmp_path: Path, db_url: str) -> AsyncIterator[FastAPI]:
    """The app with a 1 MB body limit (``NIGHTSHIFT_MAX_REQUEST_MB=1``)."""
    settings = Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, max_request_mb=1)
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


async def _chunks(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_a_body_over_the_limit_is_413_before_it_is_parsed(small_body_app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=small_body_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
        big = b'{"model": "%s", "system": "%s"}' % (MODEL.encode(), b"s" * (1024 * 1024))
        declared = await client.post("/v1/agents/", content=big, headers=JSON)
        assert refused(declared, 413) == "the request body is over this route's limit of 1 MB"
        assert declared.headers["content-type"] == "application/json"
        # Without a Content-Length (chunked), the body is counted as it arrives.
        streamed = await client.post("/v1/agents/", content=_chunks(big), headers=JSON)
        refused(streamed, 413, says="1 MB")
        # Not JSON at all, and still over: 413 before any parsing.
        refused(await client.post("/v1/tools/", content=b"\xff" * (1024 * 1024 + 1), headers=JSON), 413)
        # Under the limit, the same route answers as usual.
        ok = await client.post("/v1/agents/", json={"model": MODEL, "system": "s" * 1000})
        assert ok.status_code == 200, ok.text
        # A batch run takes bodies past the general limit: its messages may hold 100 MB of text.
        run = {"requests": [{"agent_id": "agent-missing", "input": "x" * (2 * 1024 * 1024)}]}
        refused(await client.post("/v1/messages/batches", json=run), 404, says="agent-missing")
        assert len((await client.get("/v1/agents/")).json()) == 1


@pytest.fixture
async def few_values_app(tmp_path: Path, db_url: str) -> AsyncIterator[FastAPI]:
    """The app taking JSON bodies of 1,000 values at most (``NIGHTSHIFT_MAX_REQUEST_VALUES=1000``)."""
    settings = Settings(
        home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.05, max_request_values=1000
    )
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


async def test_a_json_body_of_too_many_values_is_413_before_it_is_decoded(few_values_app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=few_values_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
        numbers = {"model": MODEL, "metadata": {"numbers": [0] * 1000}}
        assert refused(await client.post("/v1/agents/", json=numbers), 413) == (
            "the request body holds more than 1,000 JSON values (strings, numbers, keys, arrays, objects): "
            "send them in several requests, or raise NIGHTSHIFT_MAX_REQUEST_VALUES"
        )
        # A batch run's body may hold more (MAX_BATCH_REQUEST_VALUES): this one is read, and refused
        # for naming agents that do not exist.
        run = {"requests": [{"agent_id": f"agent-{i}", "input": "hi"} for i in range(300)]}
        refused(await client.post("/v1/messages/batches", json=run), 404)
        zeros = b'{"requests": [' + b"0," * MAX_BATCH_REQUEST_VALUES + b"0]}"
        refused(await client.post("/v1/messages/batches", content=zeros, headers=JSON), 413, says="2,500,000 JSON")
        # Not JSON at all is still a 413 when it has as many separators, and nothing is decoded.
        refused(await client.post("/v1/agents/", content=b"[" + b"0," * 2000, headers=JSON), 413)
        # A long text is one value, however many commas, colons and brackets it holds.
        prose = {"model": MODEL, "system": 'a, "b": [c] {d}, ' * 2000, "metadata": {"numbers": [0] * 900}}
        ok = await client.post("/v1/agents/", json=prose)
        assert ok.status_code == 200, ok.text[:300]
        assert (await client.get("/v1/agents/")).json()[0]["system"] == prose["system"]


async def test_credentials_are_checked_before_the_body_is_read(password_app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=password_app)
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        yield b'{"requests": ['
        for index in range(100):
            pulled += 1
            yield b'{"agent_id": "agent-%d", "input": "%s"},' % (index, b"x" * 65536)
        yield b'{"agent_id": "agent-x", "input": "x"}]}'

    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
        refused(await client.post("/v1/messages/batches", content=body(), headers=JSON), 401, says="Bearer")
        assert pulled == 0
        wrong = {"authorization": "Bearer not-the-password"}
        refused(await client.post("/v1/agents/", content=body(), headers=JSON | wrong), 401, says="not valid")
        assert pulled == 0
        # An unknown path gives a stranger nothing either; liveness and readiness stay open.
        refused(await client.get("/v1/no-such-route"), 401)
        assert (await client.get("/v1/health")).status_code == 200
        assert (await client.get("/v1/ready")).status_code == 200
        # With the password, the same body is read, and refused for what it says.
        # The password is not ASCII: sent as UTF-8 bytes (httpx sends str headers as ASCII only).
        allowed = {b"authorization": f"Bearer {PASSWORD}".encode(), b"content-type": b"application/json"}
        response = await client.post("/v1/messages/batches", content=body(), headers=allowed)
        refused(response, 404, says="agent-0")
        assert pulled == 100


def test_the_batch_body_limit_leaves_room_for_the_batch_input_limit() -> None:
    # 100 MB of message text needs more than 100 MB of JSON (quotes, escapes, the rest of the body).
    assert MAX_BATCH_REQUEST_MB * 1024 * 1024 >= 2 * MAX_INPUT_BYTES
    assert DEFAULT_MAX_REQUEST_MB * 1024 * 1024 < MAX_INPUT_BYTES


# --- 8. contradictory tool rules ------------------------------------------------------------------


CONTRADICTIONS: list[tuple[list[dict[str, Any]], str]] = [
    (
        [
            {"type": "exit_loop", "tool_name": "send_message"},
            {"type": "continue_loop", "tool_name": "send_message"},
        ],
        "both exit_loop",
    ),
    (
        [
            {"type": "run_first", "tool_name": "archival_memory_search"},
            {"type": "run_first", "tool_name": "conversation_search"},
        ],
        "only one tool can run first",
    ),
    ([{"type": "constrain_child_tools", "tool_name": "send_message", "children": []}], "no children"),
    ([{"type": "parent_last_tool", "tool_name": "send_message", "children": []}], "no children"),
    ([{"type": "conditional", "tool_name": "send_message", "child_output_mapping": {}}], "names no child"),
    (
        [
            {"type": "run_first", "tool_name": "send_message"},
            {"type": "constrain_child_tools", "tool_name": "send_message", "children": ["send_message"]},
            {"type": "required_before_exit", "tool_name": "core_memory_append"},
        ],
        "never let the agent call",
    ),
]


async def test_contradictory_tool_rules_are_422_saying_why(client: httpx.AsyncClient) -> None:
    for rules, says in CONTRADICTIONS:
        created = await client.post("/v1/agents/", json={"model": MODEL, "agent_type": MEMGPT, "tool_rules": rules})
        refused(created, field="tool_rules", says=says)
    await nothing_written(client)
    agent = await new_agent(client)
    for rules, says in CONTRADICTIONS:
        patched = await client.patch(f"/v1/agents/{agent['id']}", json={"tool_rules": rules})
        refused(patched, field="tool_rules", says=says)
    assert (await client.get(f"/v1/agents/{agent['id']}")).json()["tool_rules"] == []


async def test_repeated_identical_rules_are_dropped_and_a_reachable_required_tool_is_fine(
    client: httpx.AsyncClient,
) -> None:
    rules = [
        {"type": "run_first", "tool_name": "conversation_search"},
        {"type": "run_first", "tool_name": "conversation_search"},
        {"type": "exit_loop", "tool_name": "send_message"},
        {"type": "constrain_child_tools", "tool_name": "conversation_search", "children": ["core_memory_append"]},
        {"type": "required_before_exit", "tool_name": "core_memory_append"},
        {"type": "exit_loop", "tool_name": "send_message"},
    ]
    agent = await new_agent(client, tool_rules=rules)
    assert [r["type"] for r in agent["tool_rules"]] == [
        "run_first",
        "exit_loop",
        "constrain_child_tools",
        "required_before_exit",
    ]


# --- unexpected errors ----------------------------------------------------------------------------


async def test_an_unexpected_error_is_a_json_500_without_a_stack_trace(app: FastAPI) -> None:
    async def explode() -> None:
        raise RuntimeError("a secret detail of the failure")

    # A route of this test only: the app's error handling is what is under test.
    app.add_api_route("/v1/_test_explode", explode)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://nightshift.test") as client:
        response = await client.get("/v1/_test_explode")
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error; see the server log"}
    assert "secret detail" not in response.text and "Traceback" not in response.text
