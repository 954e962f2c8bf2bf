"""The Python client's models match the server's OpenAPI schema.

A field the server answers that a client model lacks, a field of another type, or a client field
the server does not have fails here, named with its model; so does a route whose answer is not
the model the client reads it into. Nested models are compared pair by pair; an enum counts as
the string it is sent as (the client keeps statuses as strings, so a new status never breaks it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from nightshift.api.app import create_app
from nightshift.client import types
from nightshift.config import Settings

# Each client model and the server's schema it reads.
PAIRS: dict[type[BaseModel], str] = {
    types.BatchRun: "BatchRunPublic",
    types.BatchRunProgress: "BatchRunProgress",
    types.AgentCounts: "AgentCounts",
    types.RunFailure: "RunFailure",
    types.ProviderBatch: "ProviderBatchPublic",
    types.ProviderProblem: "ProviderProblem",
    types.TokenUsage: "TokenUsage",
    types.BatchRunAgent: "BatchRunAgent",
    types.BatchRunAgentRequest: "BatchRunAgentRequest",
    types.RunMessage: "RunMessage",
    types.MessagePart: "MessagePart",
    types.ToolCall: "ToolCall",
    types.ToolCallFunction: "ToolCallFunction",
    types.AgentRun: "RunPublic",
    types.RunStep: "StepPublic",
    types.PromptTokensDetails: "PromptTokensDetails",
    types.CompletionTokensDetails: "CompletionTokensDetails",
    types.RunUsage: "RunUsage",
    types.BatchRunCosts: "BatchRunCosts",
    types.KindCosts: "KindCostsPublic",
    types.BatchTurnarounds: "BatchTurnarounds",
    types.ProviderTurnaround: "ProviderTurnaroundPublic",
    types.ModelTurnaround: "ModelTurnaroundPublic",
    types.ApiKey: "KeyPublic",
    types.ApiKeyCreated: "KeyCreatedPublic",
}
SERVER_NAME = {model.__name__: name for model, name in PAIRS.items()}

# (method, path) -> what the client reads its answer as: a model, a list of it, or a list under a key.
ROUTES: dict[tuple[str, str], tuple[str, str | None, str]] = {
    ("post", "/v1/messages/batches"): ("one", None, "BatchRunPublic"),
    ("get", "/v1/messages/batches"): ("list", None, "BatchRunPublic"),
    ("get", "/v1/messages/batches/{run_id}"): ("one", None, "BatchRunPublic"),
    ("get", "/v1/messages/batches/costs"): ("one", None, "BatchRunCosts"),
    ("get", "/v1/messages/batches/turnaround"): ("one", None, "BatchTurnarounds"),
    ("post", "/v1/sleeptime/run"): ("list", None, "BatchRunPublic"),
    ("patch", "/v1/messages/batches/{run_id}/cancel"): ("one", None, "BatchRunPublic"),
    ("get", "/v1/messages/batches/{run_id}/agents"): ("list", "agents", "BatchRunAgent"),
    ("get", "/v1/messages/batches/{run_id}/messages"): ("list", "messages", "RunMessage"),
    ("get", "/v1/runs"): ("list", None, "RunPublic"),
    ("get", "/v1/runs/{run_id}"): ("one", None, "RunPublic"),
    ("get", "/v1/runs/{run_id}/steps"): ("list", None, "StepPublic"),
    ("get", "/v1/runs/{run_id}/usage"): ("one", None, "RunUsage"),
    ("get", "/v1/keys/"): ("list", None, "KeyPublic"),
    ("post", "/v1/keys/"): ("one", None, "KeyCreatedPublic"),
    ("delete", "/v1/keys/{key_id}"): ("one", None, "KeyPublic"),
}


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("drift")
    app = create_app(Settings(home=home, database_url=f"sqlite:///{Path(home) / 'unused.db'}"))
    schema: dict[str, Any] = app.openapi()
    return schema


def shape(schema: dict[str, Any], defs: dict[str, Any], names: dict[str, str]) -> Any:
    """A schema's type, comparable across the two sides: a model by its server name, an enum as a string."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if "enum" in defs[name]:
            return "string"
        return ("model", names.get(name, name))
    if "anyOf" in schema:
        return ("any of", frozenset(shape(s, defs, names) for s in schema["anyOf"]))
    kind = schema.get("type")
    if "enum" in schema:
        return "string"
    if kind == "array":
        return ("array", shape(schema.get("items", {}), defs, names))
    if kind == "object":
        extra = schema.get("additionalProperties")
        return ("object", shape(extra, defs, names) if isinstance(extra, dict) else extra)
    if kind == "string" and schema.get("format") == "date-time":
        return "date-time"
    return kind or "any"


def test_every_client_model_has_the_fields_and_types_of_the_servers(openapi: dict[str, Any]) -> None:
    server_defs = openapi["components"]["schemas"]
    problems = []
    for model, server_name in PAIRS.items():
        client_schema = model.model_json_schema(mode="validation")
        client_defs = {**client_schema.get("$defs", {}), model.__name__: client_schema}
        server = server_defs[server_name]["properties"]
        client = client_schema["properties"]
        for field in sorted(server.keys() - client.keys()):
            problems.append(f"{model.__name__} lacks {server_name}.{field}")
        for field in sorted(client.keys() - server.keys()):
            problems.append(f"{model.__name__}.{field} is not a field of the server's {server_name}")
        for field in sorted(server.keys() & client.keys()):
            theirs = shape(server[field], server_defs, {})
            ours = shape(client[field], client_defs, SERVER_NAME)
            if theirs != ours:
                problems.append(f"{model.__name__}.{field} is {ours}, the server's {server_name}.{field} is {theirs}")
    assert problems == []


def test_every_route_answers_the_model_the_client_reads(openapi: dict[str, Any]) -> None:
    server_defs = openapi["components"]["schemas"]
    problems = []
    for (method, path), (many, key, name) in ROUTES.items():
        schema = openapi["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        if key is not None:
            wrapper = server_defs[schema["$ref"].rsplit("/", 1)[1]]
            if set(wrapper["properties"]) != {key}:
                problems.append(f"{method} {path}: a page of {sorted(wrapper['properties'])}, the client reads {key!r}")
                continue
            schema = wrapper["properties"][key]
        expected = ("array", ("model", name)) if many == "list" else ("model", name)
        if shape(schema, server_defs, {}) != expected:
            problems.append(f"{method} {path} answers {shape(schema, server_defs, {})}, the client reads {expected}")
    assert problems == []


def test_every_answer_model_of_the_client_is_compared() -> None:
    answers = {
        value
        for value in vars(types).values()
        if isinstance(value, type) and issubclass(value, types._Answer) and value is not types._Answer
    }
    assert answers - PAIRS.keys() == set()
