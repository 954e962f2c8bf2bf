"""/v1/agents/import and /v1/agents/{agent_id}/export: Agent Files (``.af``), as Letta serves them."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import File, Form, Header, Query, UploadFile
from fastapi.responses import Response
from pydantic import BaseModel, Field

from nightshift.api.deps import Conn, Now, Org, State
from nightshift.api.routers import secured
from nightshift.api.schemas import llm_config_from
from nightshift.errors import InvalidInput
from nightshift.services import agent_files as service
from nightshift.services.agent_files import ImportOptions

router = secured("agents")


class ImportedAgentsPublic(BaseModel):
    """What an import answers: the new agents' ids, in the file's order."""

    agent_ids: list[str] = Field(description="The ids of the imported agents")


class AgentFileResponse(Response):
    """An Agent File, as indented JSON (Letta's export answers so)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, indent=2, ensure_ascii=False).encode("utf-8")


def _secrets(text: str | None, field: str) -> dict[str, str]:
    if text is None:
        return {}
    try:
        values = json.loads(text)
    except ValueError:
        values = None
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise InvalidInput(f"{field} must be a JSON object of names to text values", field=field)
    return values


@router.post("/v1/agents/import")
async def import_agent(
    conn: Conn,
    org: Org,
    state: State,
    now: Now,
    file: Annotated[UploadFile, File(description="The Agent File (.af), plain or double-encoded JSON")],
    append_copy_suffix: Annotated[bool, Form(description='Add "_copy" to the agents\' names')] = True,
    override_existing_tools: Annotated[
        bool, Form(description="Replace the source of the organization's custom tools of the same names")
    ] = True,
    strip_messages: Annotated[bool, Form(description="Import the agents without their messages")] = False,
    name: Annotated[str | None, Form(description="The imported agents' name")] = None,
    override_name: Annotated[str | None, Form(description="Same as name (Letta's older field)")] = None,
    model: Annotated[str | None, Form(description="provider/model-name to run the agents on")] = None,
    override_model_handle: Annotated[str | None, Form(description="Same as model (Letta's older field)")] = None,
    embedding: Annotated[str | None, Form(description="Embedding handle, kept on the agents")] = None,
    override_embedding_handle: Annotated[str | None, Form(description="Same as embedding")] = None,
    secrets: Annotated[str | None, Form(description="JSON object: values of the tool secrets the file names")] = None,
    env_vars_json: Annotated[str | None, Form(description="Same as secrets (Letta's older field)")] = None,
    project_id: Annotated[str | None, Form(description="Accepted and ignored: nightshift has no projects")] = None,
    x_override_embedding_model: Annotated[str | None, Header()] = None,
) -> ImportedAgentsPublic:
    """Create the agents of an Agent File with their blocks, tools, tool rules and messages.

    One transaction: a file nightshift cannot import is a 422 naming the problem, and nothing
    is created. Custom tools come with their source; Letta's built-in tools map to nightshift's
    base tools of the same names (a built-in nightshift lacks is refused, named).
    """
    handle = model or override_model_handle
    options = ImportOptions(
        append_copy_suffix=append_copy_suffix,
        override_existing_tools=override_existing_tools,
        strip_messages=strip_messages,
        name=name or override_name,
        llm_config=llm_config_from(handle, None, models=state.models) if handle else None,
        models=state.models,
        embedding=embedding or override_embedding_handle or x_override_embedding_model,
        secrets=_secrets(secrets, "secrets") if secrets is not None else _secrets(env_vars_json, "env_vars_json"),
        read_seconds=state.settings.tool_read_seconds,
    )
    raw = await file.read()
    agents = await service.import_agent_file(conn, org, raw, options, now=now)
    return ImportedAgentsPublic(agent_ids=[a.id for a in agents])


@router.get("/v1/agents/{agent_id}/export", response_class=AgentFileResponse)
async def export_agent(
    agent_id: str,
    conn: Conn,
    org: Org,
    now: Now,
    max_steps: Annotated[int | None, Query(description="Accepted and ignored (deprecated by Letta)")] = None,
    use_legacy_format: Annotated[bool, Query(description="Letta's old single-agent format: not supported")] = False,
) -> AgentFileResponse:
    """The agent as an Agent File: its blocks, tools (custom ones with source), tool rules, settings
    and every message, with its in-context window. Secrets are named with empty values."""
    if use_legacy_format:
        raise InvalidInput("the legacy single-agent format is not supported", field="use_legacy_format")
    return AgentFileResponse(await service.export_agent_file(conn, org, agent_id, now=now))
