"""The source the sandbox runs for a tool with pydantic-model arguments, run here as the sandbox would."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from nightshift.domain.tools import Tool, ToolType
from nightshift.errors import InvalidInput
from nightshift.tools.models import sandbox_source
from nightshift.tools.schema import schema_from_args_model

NOW = datetime(2026, 1, 1, tzinfo=UTC)

SOURCE = '''from __future__ import annotations


def ship(parcel: Parcel, express: bool = False) -> str:
    """Ship a parcel."""
    return f"{type(parcel).__name__} to {parcel.to.city} ({type(parcel.to).__name__}), express={express}"
'''


class Address(BaseModel):
    city: str
    zip: str | None = None


class Parcel(BaseModel):
    to: Address
    weight_kg: float


class ShipArgs(BaseModel):
    parcel: Parcel
    express: bool = False


def _tool(json_schema: dict[str, Any] | None = None) -> Tool:
    schema = schema_from_args_model(SOURCE, ShipArgs.model_json_schema())
    return Tool(
        id="tool-ship",
        organization_id="org-1",
        name="ship",
        description=schema.description,
        json_schema=json_schema or schema.json_schema,
        args_json_schema=ShipArgs.model_json_schema(),
        tool_type=ToolType.CUSTOM,
        source_code=SOURCE,
        created_at=NOW,
        updated_at=NOW,
    )


def _run(tool: Tool, **arguments: Any) -> Any:
    namespace: dict[str, Any] = {"__name__": "tool"}
    exec(compile(sandbox_source(tool), "<tool>", "exec"), namespace)
    return namespace[tool.name](**arguments)


PARCEL = {"to": {"city": "Oslo"}, "weight_kg": 2}


def test_the_function_gets_model_instances_and_its_own_defaults() -> None:
    assert _run(_tool(), parcel=PARCEL) == "Parcel to Oslo (Address), express=False"
    assert _run(_tool(), parcel=PARCEL, express=True).endswith("express=True")


def test_a_client_json_schema_does_not_change_the_models() -> None:
    plain = {"name": "ship", "description": "Ship.", "parameters": {"type": "object", "properties": {}}}
    assert _run(_tool(plain), parcel=PARCEL) == "Parcel to Oslo (Address), express=False"


def test_arguments_that_do_not_validate_raise_in_the_tool() -> None:
    with pytest.raises(ValidationError):
        _run(_tool(), parcel={"to": {}, "weight_kg": "heavy"})


def test_the_schema_the_model_sees_is_inlined_and_checked() -> None:
    schema = schema_from_args_model(SOURCE, ShipArgs.model_json_schema())
    parcel = schema.json_schema["parameters"]["properties"]["parcel"]
    assert parcel["properties"]["to"]["properties"]["city"] == {"title": "City", "type": "string"}
    assert schema.description == "Ship a parcel."
    with pytest.raises(InvalidInput, match="not parameters of 'ship'"):
        schema_from_args_model(
            SOURCE.replace("express: bool = False", "fast: bool = False"), ShipArgs.model_json_schema()
        )
