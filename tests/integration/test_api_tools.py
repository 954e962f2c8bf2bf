"""Tools through HTTP, on SQLite and PostgreSQL: schemas from source, errors, listing and deletion."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from support.api import BASE_TOOL_NAMES, create_tool, json_object
from support.databases import sqlite_only

# Nothing here starts a batch run: the apps answer the same without a poller looking for work.
pytestmark = pytest.mark.settings(poller=False)

MODEL = "anthropic/claude-3-5-haiku-20241022"

FORECAST = '''
import json


def forecast(city: str, days: int, unit: str = "celsius", detailed: bool | None = None) -> str:
    """Forecast the weather of a city for the next days.

    Args:
        city: Name of the city.
        days: How many days ahead to forecast.
        unit: celsius or fahrenheit.
        detailed: Whether to add the hourly forecast.
    """
    return json.dumps({"city": city, "days": days})
'''

FORECAST_V2 = '''
def forecast(city: str, hours: int) -> str:
    """Forecast the weather of a city by the hour.

    Args:
        city: Name of the city.
        hours: How many hours ahead to forecast.
    """
    return f"{city}: {hours}h of sun"
'''


def numbered_tool(n: int) -> str:
    return f'''
def tool_{n}(x: int) -> int:
    """Tool number {n}.

    Args:
        x: The input.
    """
    return x + {n}
'''


async def create_agent(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "ada", "model": MODEL, "include_base_tools": False}
    body.update(overrides)
    return json_object(await client.post("/v1/agents/", json=body))


async def test_create_generates_the_schema_from_signature_and_docstring(client: httpx.AsyncClient) -> None:
    tool = await create_tool(client, FORECAST, tags=["weather"])
    assert tool["id"].startswith("tool-")
    assert tool["name"] == "forecast"
    assert tool["description"] == "Forecast the weather of a city for the next days."
    assert tool["tool_type"] == "custom"
    assert tool["source_type"] == "python"
    assert tool["source_code"] == FORECAST
    assert tool["tags"] == ["weather"]
    schema = tool["json_schema"]
    assert schema["name"] == "forecast"
    assert schema["description"] == "Forecast the weather of a city for the next days."
    parameters = schema["parameters"]
    assert parameters["type"] == "object"
    assert parameters["properties"] == {
        "city": {"type": "string", "description": "Name of the city."},
        "days": {"type": "integer", "description": "How many days ahead to forecast."},
        "unit": {"type": "string", "description": "celsius or fahrenheit.", "default": "celsius"},
        "detailed": {"type": "boolean", "description": "Whether to add the hourly forecast.", "default": None},
    }
    assert parameters["required"] == ["city", "days"]

    fetched = (await client.get(f"/v1/tools/{tool['id']}")).json()
    assert fetched == tool


async def test_create_without_trailing_slash_and_own_description(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/tools", json={"source_code": FORECAST, "description": "Weather, ahead."})
    assert response.status_code == 200, response.text
    tool = response.json()
    assert tool["description"] == "Weather, ahead."
    assert tool["json_schema"]["description"] == "Weather, ahead."
    listed = (await client.get("/v1/tools", params={"name": "forecast"})).json()
    assert [t["id"] for t in listed] == [tool["id"]]


@sqlite_only
@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def broken(:\n    pass\n", "does not parse"),
        ("x = 1\n", "defines no function"),
        ("def bare(x: int) -> int:\n    return x\n", "no docstring"),
        (
            'def half(x: int, y: int) -> int:\n    """Add two numbers.\n\n    Args:\n        x: The first.\n    """\n'
            "    return x + y\n",
            "'y'",
        ),
        (
            'def odd(x: set[int]) -> int:\n    """Count.\n\n    Args:\n        x: Numbers.\n    """\n'
            "    return len(x)\n",
            "unsupported annotation",
        ),
        (
            'def untyped(x) -> int:\n    """Count.\n\n    Args:\n        x: Numbers.\n    """\n    return 1\n',
            "no annotation",
        ),
    ],
    ids=["syntax-error", "no-function", "no-docstring", "undescribed-argument", "unsupported-annotation", "untyped"],
)
async def test_unusable_source_is_422_on_source_code(client: httpx.AsyncClient, source: str, says: str) -> None:
    response = await client.post("/v1/tools/", json={"source_code": source})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "source_code"
    assert says in body["detail"]
    assert "Traceback" not in response.text
    names = {t["name"] for t in (await client.get("/v1/tools/")).json()}
    assert names == BASE_TOOL_NAMES


@sqlite_only
async def test_undescribed_argument_names_it(client: httpx.AsyncClient) -> None:
    source = (
        'def half(x: int, y: int) -> int:\n    """Add two numbers.\n\n    Args:\n        x: The first.\n    """\n'
        "    return x + y\n"
    )
    body = (await client.post("/v1/tools/", json={"source_code": source})).json()
    assert body["detail"] == "parameter 'y' of 'half' is not described in the docstring"


@sqlite_only
async def test_missing_source_is_422(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/tools/", json={"description": "no code"})
    assert response.status_code == 422
    assert response.json()["field"] == "source_code"


async def test_duplicate_name_is_409_and_put_upserts(client: httpx.AsyncClient) -> None:
    first = await create_tool(client, FORECAST)
    duplicate = await client.post("/v1/tools/", json={"source_code": FORECAST_V2})
    assert duplicate.status_code == 409, duplicate.text
    assert "forecast" in duplicate.json()["detail"]
    assert first["id"] in duplicate.json()["detail"]
    unchanged = (await client.get(f"/v1/tools/{first['id']}")).json()
    assert unchanged["source_code"] == FORECAST

    for path in ("/v1/tools/", "/v1/tools"):
        upserted = await client.put(path, json={"source_code": FORECAST_V2, "tags": ["v2"]})
        assert upserted.status_code == 200, upserted.text
        tool = upserted.json()
        assert tool["id"] == first["id"]
        assert tool["source_code"] == FORECAST_V2
        assert tool["description"] == "Forecast the weather of a city by the hour."
        assert tool["json_schema"]["parameters"]["required"] == ["city", "hours"]
        assert set(tool["json_schema"]["parameters"]["properties"]) == {"city", "hours"}
        assert tool["tags"] == ["v2"]
    assert (await client.get(f"/v1/tools/{first['id']}")).json()["source_code"] == FORECAST_V2
    listed = (await client.get("/v1/tools/", params={"name": "forecast"})).json()
    assert len(listed) == 1

    created = await client.put("/v1/tools/", json={"source_code": numbered_tool(1)})
    assert created.status_code == 200, created.text
    assert created.json()["id"] != first["id"]
    assert created.json()["name"] == "tool_1"


async def test_base_tool_names_are_refused(client: httpx.AsyncClient) -> None:
    source = (
        'def send_message(message: str) -> None:\n    """Say something.\n\n    Args:\n'
        '        message: The words.\n    """\n    return None\n'
    )
    for method in ("POST", "PUT"):
        response = await client.request(method, "/v1/tools/", json={"source_code": source})
        assert response.status_code == 409, response.text
        assert "base tool" in response.json()["detail"]
    send = (await client.get("/v1/tools/", params={"name": "send_message"})).json()
    assert len(send) == 1
    assert send[0]["tool_type"] == "letta_core"
    assert send[0]["source_code"] is None


async def test_base_tool_source_cannot_change(client: httpx.AsyncClient) -> None:
    send = (await client.get("/v1/tools/", params={"name": "send_message"})).json()[0]
    response = await client.patch(f"/v1/tools/{send['id']}", json={"source_code": FORECAST})
    assert response.status_code == 422
    assert response.json()["field"] == "source_code"


async def test_list_includes_base_tools_and_pages_without_gaps(client: httpx.AsyncClient) -> None:
    for path in ("/v1/tools/", "/v1/tools"):
        response = await client.get(path)
        assert response.status_code == 200
        assert isinstance(response.json(), list)
        assert {t["name"] for t in response.json()} == BASE_TOOL_NAMES
    custom = [(await create_tool(client, numbered_tool(n)))["id"] for n in range(5)]

    everything = (await client.get("/v1/tools/")).json()
    all_ids = [t["id"] for t in everything]
    assert len(all_ids) == len(BASE_TOOL_NAMES) + 5
    assert all_ids[-5:] == custom
    assert {t["name"] for t in everything} == BASE_TOOL_NAMES | {f"tool_{n}" for n in range(5)}

    seen: list[str] = []
    after: str | None = None
    for _ in range(20):
        params: dict[str, Any] = {"limit": 5}
        if after is not None:
            params["after"] = after
        page = (await client.get("/v1/tools/", params=params)).json()
        if not page:
            break
        assert len(page) <= 5
        seen += [t["id"] for t in page]
        after = page[-1]["id"]
    assert seen == all_ids

    newest = (await client.get("/v1/tools/", params={"order": "desc", "limit": 3})).json()
    assert [t["id"] for t in newest] == custom[::-1][:3]
    assert [t["name"] for t in (await client.get("/v1/tools/", params={"name": "tool_3"})).json()] == ["tool_3"]
    assert (await client.get("/v1/tools/", params={"name": "nope"})).json() == []
    assert (await client.get("/v1/tools/", params={"limit": 0})).status_code == 422


async def test_patch_source_regenerates_schema(client: httpx.AsyncClient) -> None:
    tool = await create_tool(client, FORECAST)
    response = await client.patch(f"/v1/tools/{tool['id']}", json={"source_code": FORECAST_V2})
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["id"] == tool["id"]
    assert updated["name"] == "forecast"
    assert updated["source_code"] == FORECAST_V2
    assert updated["description"] == "Forecast the weather of a city by the hour."
    assert updated["json_schema"]["parameters"]["properties"]["hours"] == {
        "type": "integer",
        "description": "How many hours ahead to forecast.",
    }
    assert updated["json_schema"]["parameters"]["required"] == ["city", "hours"]
    assert (await client.get(f"/v1/tools/{tool['id']}")).json()["json_schema"] == updated["json_schema"]


async def test_patch_cannot_rename_and_bad_source_changes_nothing(client: httpx.AsyncClient) -> None:
    tool = await create_tool(client, FORECAST)
    renamed = await client.patch(f"/v1/tools/{tool['id']}", json={"source_code": numbered_tool(7)})
    assert renamed.status_code == 422
    assert renamed.json()["field"] == "source_code"
    assert "tool_7" in renamed.json()["detail"] and "forecast" in renamed.json()["detail"]

    broken = await client.patch(f"/v1/tools/{tool['id']}", json={"source_code": "def forecast(:"})
    assert broken.status_code == 422
    assert broken.json()["field"] == "source_code"
    assert (await client.get(f"/v1/tools/{tool['id']}")).json() == tool


async def test_patch_description_tags_and_limit(client: httpx.AsyncClient) -> None:
    tool = await create_tool(client, FORECAST)
    response = await client.patch(
        f"/v1/tools/{tool['id']}",
        json={"description": "Tomorrow's weather.", "tags": ["a", "b"], "return_char_limit": 300},
    )
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["description"] == "Tomorrow's weather."
    assert updated["json_schema"]["description"] == "Tomorrow's weather."
    assert updated["json_schema"]["parameters"] == tool["json_schema"]["parameters"]
    assert updated["tags"] == ["a", "b"]
    assert updated["return_char_limit"] == 300
    assert updated["source_code"] == FORECAST
    assert (await client.get(f"/v1/tools/{tool['id']}")).json() == updated


async def test_delete_then_404_and_gone_from_agents(client: httpx.AsyncClient) -> None:
    tool = await create_tool(client, FORECAST)
    other = await create_tool(client, numbered_tool(1))
    agent = await create_agent(client, tool_ids=[tool["id"], other["id"]])
    assert [t["name"] for t in agent["tools"]] == ["forecast", "tool_1"]

    deleted = await client.delete(f"/v1/tools/{tool['id']}")
    assert deleted.status_code == 200, deleted.text
    assert (await client.get(f"/v1/tools/{tool['id']}")).status_code == 404
    assert (await client.patch(f"/v1/tools/{tool['id']}", json={"description": "x"})).status_code == 404
    assert (await client.delete(f"/v1/tools/{tool['id']}")).status_code == 404
    assert (await client.get("/v1/tools/", params={"name": "forecast"})).json() == []

    after = (await client.get(f"/v1/agents/{agent['id']}")).json()
    assert [t["name"] for t in after["tools"]] == ["tool_1"]
    assert [t["id"] for t in (await client.get(f"/v1/agents/{agent['id']}/tools")).json()] == [other["id"]]
    attach = await client.patch(f"/v1/agents/{agent['id']}/tools/attach/{tool['id']}")
    assert attach.status_code in (404, 422)

    # The name is free again.
    again = await create_tool(client, FORECAST)
    assert again["id"] != tool["id"]


async def test_a_tool_named_by_a_rule_cannot_be_deleted(client: httpx.AsyncClient) -> None:
    tool = await create_tool(client, FORECAST)
    agent = await create_agent(
        client, tool_ids=[tool["id"]], tool_rules=[{"type": "exit_loop", "tool_name": "forecast"}]
    )
    refused = await client.delete(f"/v1/tools/{tool['id']}")
    assert refused.status_code == 409
    assert agent["id"] in refused.json()["detail"]
    assert (await client.get(f"/v1/tools/{tool['id']}")).status_code == 200
    assert (await client.patch(f"/v1/agents/{agent['id']}", json={"tool_rules": []})).status_code == 200
    assert (await client.delete(f"/v1/tools/{tool['id']}")).status_code == 200


@sqlite_only
async def test_unknown_tool_ids_are_404(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/tools/tool-nope")).status_code == 404
    assert (await client.patch("/v1/tools/tool-nope", json={"description": "x"})).status_code == 404
    response = await client.delete("/v1/tools/tool-nope")
    assert response.status_code == 404
    assert "tool-nope" in response.json()["detail"]


async def test_agent_tools_page_to_an_end(client: httpx.AsyncClient) -> None:
    tools = [(await create_tool(client, numbered_tool(n)))["id"] for n in range(4)]
    # Given out of creation order: the agent's own order is kept.
    order = [tools[2], tools[0], tools[3], tools[1]]
    agent = await create_agent(client, tool_ids=order)
    path = f"/v1/agents/{agent['id']}/tools"
    assert [t["id"] for t in (await client.get(path)).json()] == order
    seen: list[str] = []
    after: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 3} | ({"after": after} if after else {})
        page = (await client.get(path, params=params)).json()
        if not page:
            break
        seen += [t["id"] for t in page]
        after = page[-1]["id"]
    assert seen == order
    assert [t["id"] for t in (await client.get(path, params={"before": order[2]})).json()] == order[:2]
    assert [t["id"] for t in (await client.get(path, params={"order": "desc", "limit": 2})).json()] == [
        order[3],
        order[2],
    ]


GRADE = '''
from typing import Literal


def grade(score: Literal[1, 2, 3]) -> str:
    """Grade the answer.

    Args:
        score: 1 (poor) to 3 (good).
    """
    return str(score)
'''

GEMINI = "google_ai/gemini-2.5-flash"


async def test_a_tool_gemini_cannot_take_is_refused_where_it_meets_a_gemini_agent(client: httpx.AsyncClient) -> None:
    grade = await create_tool(client, GRADE)
    forecast = await create_tool(client, FORECAST)
    # Other providers take it; Gemini's schemas have enums of strings only.
    claude = await create_agent(client, tool_ids=[grade["id"]])

    refused = await client.post(
        "/v1/agents/", json={"name": "g", "model": GEMINI, "include_base_tools": False, "tool_ids": [grade["id"]]}
    )
    assert refused.status_code == 422
    assert (
        "tool 'grade' cannot be given to google_ai agents: parameters.score: "
        "an enum of values that are not strings is not supported by Gemini" in refused.text
    )
    gemini = await create_agent(client, model=GEMINI, tool_ids=[forecast["id"]])
    attached = await client.patch(f"/v1/agents/{gemini['id']}/tools/attach/{grade['id']}")
    assert attached.status_code == 422
    moved = await client.patch(f"/v1/agents/{claude['id']}", json={"model": GEMINI})
    assert moved.status_code == 422
    assert (await client.get(f"/v1/agents/{claude['id']}")).json()["llm_config"]["model"] == MODEL.partition("/")[2]
    # A tool a Gemini agent has cannot change into one Gemini cannot take.
    changed = await client.patch(
        f"/v1/tools/{forecast['id']}", json={"source_code": GRADE.replace("grade", "forecast")}
    )
    assert changed.status_code == 422
    assert "cannot be given to google_ai agents" in changed.text
    assert (await client.get(f"/v1/tools/{forecast['id']}")).json()["json_schema"] == forecast["json_schema"]
    tools = (await client.get(f"/v1/agents/{gemini['id']}/tools")).json()
    assert [t["name"] for t in tools] == ["forecast"]
