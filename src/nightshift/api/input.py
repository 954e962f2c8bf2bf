"""What every request body and URL must satisfy before a handler sees it.

Request bodies derive from :class:`Body`: once a body is validated, anything in it (metadata
nested too, tool rules, messages) that the databases or the JSON encoder cannot hold (see
``domain/limits.py``) makes the request a 422 naming the field. Path and query parameters get the
same check from :func:`storable_url`, a dependency of every router. The size types below carry
the limits into the schema, so the OpenAPI description shows them.

The walk that finds unstorable values is Python, and takes as long as the body is large; FastAPI
validates bodies on the event loop, so for a body past a few kilobytes :func:`storable_body` (a dependency of
every router, which FastAPI runs after decoding the body and before validating it) walks the
decoded JSON on a thread first, and the models skip the walk when it found nothing. That walk is
bounded by the number of values a body may hold (``api/body_limit.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Self

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, Tag, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from nightshift.domain.limits import (
    MAX_LIST_ITEMS,
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
Ids = Annotated[list[str], Field(max_length=MAX_LIST_ITEMS)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Tags = Annotated[list[Name], Field(max_length=MAX_TAGS)]


def variant(name: str) -> Tag:
    """The tag of one variant of a union that a discriminator tells apart, as the discriminator
    returns it. Pydantic puts the tag in an error's location; written ``<name>``, it is left out of
    the field path a 422 names (``messages.0.role``, not ``messages.0.message.role``)."""
    return Tag(f"<{name}>")


def is_variant(part: object) -> bool:
    """Whether a part of an error's location is a union variant's tag (see :func:`variant`)."""
    return isinstance(part, str) and part.startswith("<") and part.endswith(">")


class Body(BaseModel):
    """A request body: unknown fields are ignored (Letta's clients send many), and every value
    must be storable."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="after")
    def _storable(self) -> Self:
        if not _checked_off_the_loop():
            problem = storage_problem(self)
            if problem is not None:
                raise PydanticCustomError(UNSTORABLE, "{reason}", {"reason": problem.reason, "where": problem.where})
        return self


def _unstorable(problem: StorageProblem) -> dict[str, object]:
    # The error pydantic reports for the validator's PydanticCustomError, at the body's top.
    ctx = {"reason": problem.reason, "where": problem.where}
    return {"type": UNSTORABLE, "loc": ("body",), "msg": problem.reason, "input": None, "ctx": ctx}


@dataclass(slots=True)
class _BodyCheck:
    """What :func:`storable_body` found of the request's body: ``storable`` once it walked all of it."""

    storable: bool = False


# One per request with a JSON body, set around the app by ``api/body_limit.py`` (so that nothing
# of it outlives the request, whatever task runs the app).
_BODY_CHECK: ContextVar[_BodyCheck | None] = ContextVar("nightshift_body_check", default=None)

# A body this small is walked as it is validated, on the event loop: that costs less than a trip
# to a thread and back.
WALK_ON_THE_LOOP_BYTES = 16 * 1024


@contextmanager
def body_check() -> Iterator[None]:
    """Let :func:`storable_body` record, for the request that runs inside, what it checked."""
    token = _BODY_CHECK.set(_BodyCheck())
    try:
        yield
    finally:
        _BODY_CHECK.reset(token)


def _checked_off_the_loop() -> bool:
    check = _BODY_CHECK.get()
    return check is not None and check.storable


async def storable_body(request: Request) -> None:
    """Walk a large JSON body for unstorable values on a thread, before FastAPI validates it.

    A dependency of every router: FastAPI has decoded the body by now (``request.json()`` gives
    it back) and validates it into the route's model afterwards. When the decoded JSON holds
    nothing unstorable, the model skips its own walk. When it does, the value may sit in a field
    nightshift ignores (which it then drops): the route's model is validated on the thread too,
    and only a problem in what the model keeps is a 422, the same as the model's own walk gives.
    """
    check = _BODY_CHECK.get()
    model = _body_model(request)
    if check is None or model is None or not is_json(request.headers.get("content-type")):
        return
    if len(await request.body()) <= WALK_ON_THE_LOOP_BYTES:
        return
    decoded = await request.json()
    errors = await asyncio.to_thread(_unstorable_in, decoded, model)
    if errors:
        raise RequestValidationError(errors)
    check.storable = True


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI decodes a body of this content type as JSON (``application/json``, ``.../x+json``)."""
    if not content_type:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = kind.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _body_model(request: Request) -> type[Body] | None:
    # The route FastAPI matched, and the model its body is validated into.
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    return model if isinstance(model, type) and issubclass(model, Body) else None


def _unstorable_in(decoded: Any, model: type[Body]) -> list[dict[str, Any]]:
    """The validation errors of the unstorable values of ``decoded`` that ``model`` keeps, if any."""
    if storage_problem(decoded) is None:
        return []
    try:
        validated = model.model_validate(decoded)
    except ValidationError as exc:
        # Other errors are FastAPI's to report, when it validates the body.
        return [{**error, "loc": ("body", *error["loc"])} for error in exc.errors() if error["type"] == UNSTORABLE]
    problem = storage_problem(validated)
    return [_unstorable(problem)] if problem is not None else []


async def storable_url(request: Request) -> None:
    """Refuse a path or query parameter holding a NUL character (PostgreSQL cannot compare it)."""
    for kind, params in (("path", request.path_params.items()), ("query", request.query_params.multi_items())):
        for name, value in params:
            problem = text_problem(str(value))
            if problem is not None:
                raise InvalidInput(f"{kind} parameter {name!r} {problem}", field=f"{kind}.{name}")


def copied_fields(model: type[BaseModel], domain: type) -> tuple[str, ...]:
    """The fields of a schema ``model`` that the ``domain`` dataclass has under the same name.

    They are copied as they are, each way (a response from a domain object, a service's input
    from a request body), so that a field added to both shows without a line of mapping; the
    others are the schema's own (renamed, computed, defaulted).
    """
    names = {spec.name for spec in dataclasses.fields(domain)}
    return tuple(name for name in model.model_fields if name in names)
