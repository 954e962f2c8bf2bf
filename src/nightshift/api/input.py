"""What every request body and URL must satisfy before a handler sees it.

Request bodies derive from :class:`Body`: once a body is validated, anything in it (metadata
nested too, tool rules, messages) that the databases or the JSON encoder cannot hold (see
``domain/limits.py``) makes the request a 422 naming the field. Path and query parameters get the
same check from :func:`storable_url`, a dependency of every router. The size types below carry
the limits into the schema, so the OpenAPI description shows them.
"""

from __future__ import annotations

from typing import Annotated, Self

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from nightshift.domain.limits import MAX_NAME_CHARS, MAX_TAGS, MAX_TEXT_CHARS, storage_problem, text_problem
from nightshift.errors import InvalidInput

# The type of the validation error a body gets for an unstorable value; ``ctx["where"]`` is the
# path inside the model, which ``api/errors.py`` appends to the error's location.
UNSTORABLE = "unstorable_value"

Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Tags = Annotated[list[Name], Field(max_length=MAX_TAGS)]


class Body(BaseModel):
    """A request body: unknown fields are ignored (Letta's clients send many), and every value
    must be storable."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="after")
    def _storable(self) -> Self:
        problem = storage_problem(self)
        if problem is not None:
            raise PydanticCustomError(UNSTORABLE, "{reason}", {"reason": problem.reason, "where": problem.where})
        return self


async def storable_url(request: Request) -> None:
    """Refuse a path or query parameter holding a NUL character (PostgreSQL cannot compare it)."""
    for kind, params in (("path", request.path_params.items()), ("query", request.query_params.multi_items())):
        for name, value in params:
            problem = text_problem(str(value))
            if problem is not None:
                raise InvalidInput(f"{kind} parameter {name!r} {problem}", field=f"{kind}.{name}")
