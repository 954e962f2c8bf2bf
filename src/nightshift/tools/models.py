"""Tools whose arguments are pydantic models: the source the sandbox runs for them.

A Letta client sends such a tool as the function's source (its annotations name model classes
the source does not define) plus the model's JSON schema (``args_json_schema``). The sandbox
runs the tool in a process that knows nothing of the client's classes, so the source it gets is
wrapped: a prelude rebuilds a pydantic model for every object schema that has a ``title`` (the
classes' names, as pydantic writes them) and binds each to its name before the function is
defined; after it, the function is replaced by one that validates the model's arguments into
those classes and calls the original with them. The model sees plain JSON; the function gets
model instances, as it did in Letta.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nightshift.domain.tools import Tool
from nightshift.errors import InvalidInput
from nightshift.tools.schema import inlined_parameters

# Runs in the tool's process (which has pydantic, as the server's runtime does), before the
# client's source. Names start with _ns_ to stay out of the way of the tool's own.
_PRELUDE = """
import typing as _ns_typing

import pydantic as _ns_pydantic

_NS_SCALARS = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


def _ns_type(schema, models):
    if not isinstance(schema, dict):
        return _ns_typing.Any
    if "enum" in schema and schema["enum"]:
        return _ns_typing.Literal[tuple(schema["enum"])]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            members = tuple(_ns_type(member, models) for member in schema[key])
            return _ns_typing.Union[members] if len(members) > 1 else members[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        members = tuple(_ns_type({**schema, "type": k}, models) for k in kind)
        return _ns_typing.Union[members] if len(members) > 1 else members[0]
    if kind == "object" and isinstance(schema.get("properties"), dict) and schema.get("title"):
        return _ns_model(schema, models)
    if kind == "object":
        values = schema.get("additionalProperties")
        return dict[str, _ns_type(values, models)] if isinstance(values, dict) else dict
    if kind == "array":
        items = schema.get("items")
        return list[_ns_type(items, models)] if isinstance(items, dict) else list
    return _NS_SCALARS.get(kind, _ns_typing.Any)


def _ns_model(schema, models):
    title = str(schema.get("title") or "Arguments")
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in title)
    if not name.isidentifier():
        name = "_" + name
    if name in models:
        return models[name]
    required = set(schema.get("required") or ())
    fields = {}
    for field, sub in schema["properties"].items():
        if field in required:
            fields[field] = (_ns_type(sub, models), ...)
        else:
            default = sub.get("default") if isinstance(sub, dict) else None
            fields[field] = (_ns_typing.Optional[_ns_type(sub, models)], default)
    models[name] = _ns_pydantic.create_model(name, **fields)
    return models[name]


_ns_models = {}
_ns_arguments = _ns_model({**_NS_PARAMETERS, "title": "_NsArguments"}, _ns_models)
for _ns_name, _ns_class in _ns_models.items():
    if not _ns_name.startswith("_"):
        globals().setdefault(_ns_name, _ns_class)
"""

_EPILOGUE = """

def _ns_wrapped(_ns_function):
    def _ns_call(**arguments):
        parsed = _ns_arguments.model_validate(arguments)
        return _ns_function(**{name: getattr(parsed, name) for name in parsed.model_fields_set})

    return _ns_call


globals()[_NS_FUNCTION] = _ns_wrapped(globals()[_NS_FUNCTION])
"""


def sandbox_source(tool: Tool) -> str:
    """The source the sandbox runs for ``tool``: its own, wrapped as above when it has an argument model."""
    source = tool.source_code or ""
    if tool.args_json_schema is None:
        return source
    # The model's own schema (the client's json_schema, when it gave one too, may lack the titles).
    try:
        parameters: Any = inlined_parameters(tool.args_json_schema)
    except InvalidInput:  # checked when the tool was stored; a schema stored otherwise falls back
        parameters = tool.json_schema.get("parameters") or {}
    # A __future__ import must come first in a module: it moves above the prelude.
    futures = "".join(f"{line}\n" for line in _FUTURE.findall(source))
    header = (
        f"import json as _ns_json\n_NS_PARAMETERS = _ns_json.loads({json.dumps(parameters)!r})\n"
        f"_NS_FUNCTION = {tool.name!r}\n"
    )
    return f"{futures}{header}{_PRELUDE}\n{_FUTURE.sub('', source)}\n{_EPILOGUE}"


_FUTURE = re.compile(r"^from __future__ import [^\n]*$", re.MULTILINE)
