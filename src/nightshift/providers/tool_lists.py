"""A provider's form of each tool, made once per tool schema rather than once per request.

The agents of a step share their tools' schema dicts (``store.agents.load_agents`` makes each
tool once), which are never changed (``ModelRequest``): a step of ten thousand agents carries a
handful of distinct schemas. Each is converted once and found again by its identity; the entry
holds the schema, so that its identity cannot be reused while the entry lives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

# The conversions kept; when full, they are all forgotten (a step needs a few dozen at most).
KEPT = 4096

Schema = Mapping[str, Any]


def converted_once(
    convert: Callable[[Schema, bool], dict[str, Any]],
) -> Callable[[Schema, bool], dict[str, Any]]:
    """``convert(schema, agent_arguments)`` kept by the identity of ``schema``.

    Every call for the same schema returns the same object: a caller may put it in a request
    (or replace it there), never change it. A conversion that raises is not kept.
    """
    kept: dict[tuple[int, bool], tuple[Schema, dict[str, Any]]] = {}

    @functools.wraps(convert)
    def converted(schema: Schema, agent_arguments: bool) -> dict[str, Any]:
        key = (id(schema), agent_arguments)
        found = kept.get(key)
        if found is not None and found[0] is schema:
            return found[1]
        made = convert(schema, agent_arguments)
        if len(kept) >= KEPT:
            kept.clear()
        kept[key] = (schema, made)
        return made

    return converted
