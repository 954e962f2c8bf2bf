"""Whether a tool's parameter schema is a JSON Schema, as both APIs check it before answering.

Both providers refuse a request whose tool schema does not validate against the JSON Schema
meta-schema (Anthropic names draft 2020-12; OpenAI's messages are those of Python's
``jsonschema``, e.g. ``[] is not of type 'object', 'boolean'``). The check is the meta-schema
validation of the ``jsonschema`` library. Results are cached by the schema's JSON text: every
request of a batch carries the same few tool schemas, so each is checked once, not once a request.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

_CACHE_SIZE = 4096


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (draft 2020-12), or None when it is.

    Args:
        schema: The schema as received (JSON values).

    Returns:
        The validator's message for the most relevant error, e.g.
        ``"[] is not of type 'object', 'boolean'"``; None for a valid schema.
    """
    try:
        text = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        return "the schema is not JSON"
    return _problem_of(text)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _problem_of(text: str) -> str | None:
    try:
        Draft202012Validator.check_schema(json.loads(text))
    except SchemaError as error:
        return error.message
    return None
