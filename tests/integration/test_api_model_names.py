"""An agent's model is checked when it is created, changed or imported, on SQLite and PostgreSQL.

A misspelt model is a 422 that names the close known ones, not a failure of every step later. A
model the price data does not know but that exists (newer than the data) is allowed by
NIGHTSHIFT_EXTRA_MODELS (or priced by NIGHTSHIFT_PRICES).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from nightshift.config import Settings
from support.agent_files import SUPPORT_DESK, document, double_encoded
from support.api import json_object

MODEL = "anthropic/claude-3-5-haiku-20241022"
NEWER = "(a model newer than nightshift's price data can be allowed with NIGHTSHIFT_EXTRA_MODELS)"


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(
        home=tmp_path / "home",
        database_url=db_url,
        poll_interval_seconds=0.05,
        extra_models=["anthropic/claude-x", "openai/gpt-y*"],
        prices={"openai/my-model": {"input": 1, "output": 2, "cache_write": 1, "cache_read": 0.5}},
    )


def refused(response: httpx.Response) -> str:
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "model"
    message: str = response.json()["detail"]
    return message


async def test_an_unknown_model_is_refused_with_the_close_names(client: httpx.AsyncClient) -> None:
    message = refused(await client.post("/v1/agents/", json={"name": "ada", "model": "openai/gpt-4o-mni"}))

    assert message.startswith("unknown model 'openai/gpt-4o-mni'; did you mean openai/gpt-4o-mini or ")
    assert message.endswith(NEWER)
    assert (await client.get("/v1/agents/")).json() == []
    # Letta's llm_config names it in two fields; nothing close: where to look.
    config = {"model": "zzz", "model_endpoint_type": "openai"}
    message = refused(await client.post("/v1/agents/", json={"name": "ada", "llm_config": config}))
    assert message == f"unknown model 'openai/zzz'; see openai's known models: GET /v1/models/ {NEWER}"


async def test_known_models_and_the_allowed_ones_are_taken(client: httpx.AsyncClient) -> None:
    allowed = (
        MODEL,
        "anthropic/claude-3-5-haiku-latest",  # priced by the data's rules for the family
        "anthropic/claude-x",  # NIGHTSHIFT_EXTRA_MODELS
        "openai/gpt-y-2027",  # its "openai/gpt-y*"
        "openai/my-model",  # NIGHTSHIFT_PRICES
    )
    for model in allowed:
        created = json_object(await client.post("/v1/agents/", json={"name": "ada", "model": model}))
        assert created["model"] == model


async def test_an_extra_model_is_among_the_close_names(client: httpx.AsyncClient) -> None:
    message = refused(await client.post("/v1/agents/", json={"name": "ada", "model": "anthropic/claude-xx"}))
    assert message.startswith("unknown model 'anthropic/claude-xx'; did you mean anthropic/claude-x or ")


async def test_an_update_to_an_unknown_model_changes_nothing(client: httpx.AsyncClient) -> None:
    agent = json_object(await client.post("/v1/agents/", json={"name": "ada", "model": MODEL}))
    path = f"/v1/agents/{agent['id']}"

    message = refused(await client.patch(path, json={"model": "anthropic/claude-nope"}))

    assert message.startswith("unknown model 'anthropic/claude-nope'; did you mean anthropic/claude-")
    assert json_object(await client.get(path))["model"] == MODEL
    renamed = json_object(await client.patch(path, json={"name": "bea", "max_tokens": 512}))  # the model is kept
    assert (renamed["name"], renamed["model"]) == ("bea", MODEL)


async def _import(client: httpx.AsyncClient, content: bytes, **form: str) -> httpx.Response:
    files = {"file": ("agents.af", content, "application/json")}
    return await client.post("/v1/agents/import", files=files, data=form)


async def test_an_agent_file_with_an_unknown_model_imports_nothing(client: httpx.AsyncClient) -> None:
    doc: dict[str, Any] = document(SUPPORT_DESK)
    doc["agents"][1]["llm_config"].update(handle="openai/gpt-4o-mni", model="gpt-4o-mni")

    message = refused(await _import(client, double_encoded(doc)))

    assert "unknown model 'openai/gpt-4o-mni'; did you mean openai/gpt-4o-mini" in message
    assert (await client.get("/v1/agents/")).json() == []
    option = refused(await _import(client, SUPPORT_DESK.read_bytes(), model="anthropic/claude-nope"))
    assert option.startswith("unknown model 'anthropic/claude-nope'")
    assert (await client.get("/v1/agents/")).json() == []
    # The model option replaces the file's unknown one.
    imported = json_object(await _import(client, double_encoded(doc), model=MODEL))
    assert len(imported["agent_ids"]) == 2
