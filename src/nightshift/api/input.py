"""What every request body and URL must satisfy before a handler sees it.

Request bodies derive from :class:`Body`: once a body is validated, anything in it (metadata
nested too, tool rules, messages) that the databases or the JSON encoder cannot hold (see
``domain/limits.py``) makes the request a 422 naming the field. Path and query parameters get the
same check from :func:`storable_url`, a dependency of every router. The size types below carry
the limits into the schema, so the OpenAPI description shows them.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Self

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from nightshift.domain.limits import (
    MAX_NAME_CHARS,
    MAX_TAGS,
    MAX_TEXT_CHARS,
    StorageProblem,
    storage_problem,
    text_problem,
)
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
    # False for a body whose route runs the check itself, off the event loop (``check_storable``).
    checked_when_validated: ClassVar[bool] = True

    @model_validator(mode="after")
    def _storable(self) -> Self:
        if self.checked_when_validated and (problem := storage_problem(self)) is not None:
            raise PydanticCustomError(UNSTORABLE, "{reason}", {"reason": problem.reason, "where": problem.where})
        return self


def check_storable(body: Body) -> None:
    """The check a body with ``checked_when_validated = False`` skipped, for its route to run on a
    thread: the same walk and the same 422 as when validated.

    A 5,000-agent batch run's body takes 18 ms of walking on the development machine; FastAPI
    validates bodies on the event loop, which answers no one else meanwhile, while on a thread
    the loop takes its turn every few milliseconds (the interpreter's switch interval).
    """
    problem = storage_problem(body)
    if problem is not None:
        raise RequestValidationError([_unstorable(problem)])


def _unstorable(problem: StorageProblem) -> dict[str, object]:
    # The error pydantic reports for the validator's PydanticCustomError, at the body's top.
    ctx = {"reason": problem.reason, "where": problem.where}
    return {"type": UNSTORABLE, "loc": ("body",), "msg": problem.reason, "input": None, "ctx": ctx}


async def storable_url(request: Request) -> None:
    """Refuse a path or query parameter holding a NUL character (PostgreSQL cannot compare it)."""
    for kind, params in (("path", request.path_params.items()), ("query", request.query_params.multi_items())):
        for name, value in params:
            problem = text_problem(str(value))
            if problem is not None:
                raise InvalidInput(f"{kind} parameter {name!r} {problem}", field=f"{kind}.{name}")
