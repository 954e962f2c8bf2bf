"""Reading the API's answers in tests: the status checked first, then the JSON body with its type."""

from __future__ import annotations

from typing import Any

import httpx

# The base tools an agent gets by default, and those every organization has (listed here, not
# read from the code, so that a tool lost or added by mistake fails the tests).
# The memgpt loop's agent type, for tests of what that loop does (a new agent is a letta_v1 one).
MEMGPT = "memgpt_v2_agent"
DEFAULT_TOOL_NAMES = frozenset(
    {
        "send_message",
        "conversation_search",
        "archival_memory_insert",
        "archival_memory_search",
        "core_memory_append",
        "core_memory_replace",
        "rethink_memory",
    }
)
BASE_TOOL_NAMES = DEFAULT_TOOL_NAMES | frozenset(
    {
        "memory_insert",
        "memory_replace",
        "memory_rethink",
        "memory_finish_edits",
        "memory",
    }
)


def json_object(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    """The JSON object ``response`` carries, once its status is ``status`` (else the body is the failure)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body, dict), body
    return body


def json_list(response: httpx.Response, status: int = 200) -> list[Any]:
    """The JSON array ``response`` carries, once its status is ``status`` (else the body is the failure)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body, list), body
    return body


async def create_tool(client: httpx.AsyncClient, source: str, **extra: Any) -> dict[str, Any]:
    """A custom tool made through the API from its source (``extra``: more fields of the body)."""
    return json_object(await client.post("/v1/tools/", json={"source_code": source, **extra}))
