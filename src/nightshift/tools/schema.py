"""JSON schemas for tools, derived from a Python function's signature and docstring.

Two entry points share one mapping: :func:`schema_from_source` reads user source code with ``ast``
(user code is never executed in the server process) and :func:`schema_from_function` reads a live
function with ``inspect`` (for the in-process base tools). Both reduce what they read to a small
intermediate form (``tools.signatures``: :class:`Signature`, :class:`Annotation`) and :func:`_build` turns that into the
``{"name", "description", "parameters"}`` schema the providers take, or an :class:`InvalidInput`
whose message says what to change.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import docstring_parser

from nightshift.domain.limits import MAX_SCHEMA_NODES, TOOL_NAME, TOOL_NAME_PATTERN, schema_nodes_over, storage_problem
from nightshift.errors import InvalidInput
from nightshift.tools.signatures import (
    INJECTED_PARAMETERS,
    SOURCE_FIELD,
    TOO_COMPLEX,
    Annotation,
    Kind,
    Signature,
    function_node,
    signature_from_ast,
    signature_from_function,
)

_SUPPORTED = "use str, int, float, bool, list, dict, Optional or Literal"
_SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSchema:
    """A tool's name, description and the JSON schema handed to the model."""

    name: str
    description: str
    json_schema: dict[str, Any]


def schema_from_source(source_code: str, *, name: str | None = None) -> ToolSchema:
    """Build the schema of one function defined in ``source_code``, without running it.

    Args:
        source_code: Python source defining the tool function (and possibly helpers).
        name: The function to describe; by default the last top-level function in the module.

    Returns:
        The tool's schema; its name is the function's name.

    Raises:
        InvalidInput: (field ``source_code``) the source does not parse, defines no such function,
            or the function's signature or docstring cannot be described as a JSON schema.
    """
    try:
        return _build(signature_from_ast(function_node(source_code, name)))
    except (RecursionError, MemoryError) as exc:
        # Reading a deeply nested annotation or default (ast.unparse, literal_eval) recurses too.
        raise InvalidInput(TOO_COMPLEX, field=SOURCE_FIELD) from exc


def schema_from_args_model(source_code: str, args_json_schema: Mapping[str, Any]) -> ToolSchema:
    """The schema of a tool whose arguments a client's pydantic model describes (Letta's ``args_json_schema``).

    The function's annotations may name the model's classes, which the source does not define
    (the sandbox rebuilds them from the model schema); so only the function's name, docstring
    and parameter names are read from the source. The parameters shown to the model are the
    model's schema with every ``$ref`` inlined, since not every provider follows references.

    Raises:
        InvalidInput: (field ``source_code`` or ``args_json_schema``) no usable function, a
            schema that is not an object schema, a recursive model, or parameters and model
            fields that do not match.
    """
    try:
        node = function_node(source_code, None)
    except (RecursionError, MemoryError) as exc:
        raise InvalidInput(TOO_COMPLEX, field=SOURCE_FIELD) from exc
    fn = node.name
    if isinstance(node, ast.AsyncFunctionDef):
        raise InvalidInput(f"function {fn!r} is async: tools must be plain 'def' functions", field=SOURCE_FIELD)
    docstring = ast.get_docstring(node, clean=True) or ""
    try:
        description = (docstring_parser.parse(docstring).description or "").strip()
    except docstring_parser.ParseError:
        description = docstring.strip()
    parameters = inlined_parameters(args_json_schema)
    signature = signature_from_ast(node)
    names = {p.name for p in signature.parameters if p.name not in INJECTED_PARAMETERS}
    fields = set(parameters["properties"])
    if signature.parameters and signature.parameters[-1].kind is Kind.VAR_KEYWORD:
        names |= fields
    extra = sorted(fields - names)
    if extra:
        raise InvalidInput(f"args_json_schema has fields {extra} that are not parameters of {fn!r}", field=_ARGS_FIELD)
    unset = sorted(
        p.name
        for p in signature.parameters
        if p.name in names - fields and not p.has_default and p.kind is Kind.KEYWORD
    )
    if unset:
        raise InvalidInput(
            f"parameters {unset} of {fn!r} have no default and are not fields of args_json_schema", field=_ARGS_FIELD
        )
    json_schema = {"name": fn, "description": description, "parameters": parameters}
    problem = storage_problem(json_schema)
    if problem is not None:
        raise InvalidInput(f"args_json_schema at {problem.where} {problem.reason}", field=_ARGS_FIELD)
    return ToolSchema(name=fn, description=description, json_schema=json_schema)


_ARGS_FIELD = "args_json_schema"
_MAX_INLINED_NODES = 10_000


def inlined_parameters(args_json_schema: Mapping[str, Any]) -> dict[str, Any]:
    """A pydantic model's schema as an object schema without ``$defs`` and ``$ref``.

    Raises:
        InvalidInput: (field ``args_json_schema``) see :func:`schema_from_args_model`.
    """
    if args_json_schema.get("type") != "object" or not isinstance(args_json_schema.get("properties"), dict):
        raise InvalidInput(
            'args_json_schema must be an object schema with properties ({"type": "object", "properties": {...}}), '
            "as pydantic's model_json_schema() gives",
            field=_ARGS_FIELD,
        )
    if schema_nodes_over(args_json_schema):
        raise InvalidInput(_too_many_nodes("args_json_schema"), field=_ARGS_FIELD)
    from jsonschema import Draft202012Validator  # only a tool given its schema needs it: not every start
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(dict(args_json_schema))
    except SchemaError as exc:
        where = ".".join(str(part) for part in exc.path)
        raise InvalidInput(
            f"args_json_schema is not a valid JSON Schema: at {where or 'its top'}: {exc.message[:200]}",
            field=_ARGS_FIELD,
        ) from None
    definitions = args_json_schema.get("$defs") or args_json_schema.get("definitions") or {}
    budget = [_MAX_INLINED_NODES]

    def inline(node: Any, seen: tuple[str, ...]) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise InvalidInput("args_json_schema is too large once its references are inlined", field=_ARGS_FIELD)
        if isinstance(node, list):
            return [inline(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        reference = node.get("$ref")
        if isinstance(reference, str):
            name = reference.rsplit("/", 1)[-1]
            if not reference.startswith(("#/$defs/", "#/definitions/")) or name not in definitions:
                raise InvalidInput(
                    f"args_json_schema refers to {reference!r}, which it does not define", field=_ARGS_FIELD
                )
            if name in seen:
                raise InvalidInput(
                    f"args_json_schema's model {name!r} contains itself; tool arguments cannot be recursive",
                    field=_ARGS_FIELD,
                )
            rest = {k: inline(v, seen) for k, v in node.items() if k != "$ref"}
            return {**inline(definitions[name], (*seen, name)), **rest}
        return {k: inline(v, seen) for k, v in node.items() if k not in ("$defs", "definitions")}

    parameters: dict[str, Any] = inline(dict(args_json_schema), ())
    parameters.setdefault("required", [])
    return parameters


def _too_many_nodes(what: str) -> str:
    return (
        f"{what} has more than {MAX_SCHEMA_NODES:,} values (objects, arrays and their members): a tool's "
        "schema goes to the model with every request, keep it smaller"
    )


def client_json_schema(given: Mapping[str, Any], function_name: str) -> dict[str, Any]:
    """A ``json_schema`` the client gave instead of the one made from the source, once checked.

    It must be an object whose ``name`` (when given) is the function's name, whose
    ``description`` (when given) is text, and whose ``parameters`` is a valid JSON Schema (draft
    2020-12) of type object, since the providers get it as the tool's input schema. Its size is
    bounded (``MAX_SCHEMA_NODES``) before it is checked: the check is slow Python.

    Raises:
        InvalidInput: (field ``json_schema...``) what is wrong with it.
    """
    name = given.get("name", function_name)
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise InvalidInput(
            f"json_schema.name must be a tool name matching {TOOL_NAME_PATTERN}, got {_shown(name)}",
            field="json_schema.name",
        )
    if name != function_name:
        raise InvalidInput(
            f"json_schema.name is {name!r} but the function is {function_name!r}: the model calls a tool by its "
            "function's name",
            field="json_schema.name",
        )
    description = given.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidInput(
            f"json_schema.description must be text, got {_shown(description)}", field="json_schema.description"
        )
    parameters = given.get("parameters")
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise InvalidInput(
            'json_schema.parameters must be a JSON Schema of type object ({"type": "object", "properties": '
            f"{{...}}}}): a tool takes named arguments; got {_shown(parameters)}",
            field="json_schema.parameters",
        )
    if schema_nodes_over(given):
        raise InvalidInput(_too_many_nodes("json_schema"), field="json_schema")
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        where = ".".join(str(part) for part in exc.path)
        raise InvalidInput(
            f"json_schema.parameters is not a valid JSON Schema: at {where or 'its top'}: {_shorter(exc.message)}",
            field="json_schema.parameters",
        ) from None
    return {**given, "name": name, "parameters": parameters}


def _shown(value: object) -> str:
    return _shorter(repr(value))


def _shorter(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def schema_from_function(fn: Callable[..., Any]) -> ToolSchema:
    """Build the schema of a live function (a base tool that runs in-process).

    Args:
        fn: The tool function; its annotations must resolve with ``typing.get_type_hints``.

    Returns:
        The tool's schema; its name is ``fn.__name__``.

    Raises:
        InvalidInput: (field ``source_code``) the signature or docstring cannot be described.
    """
    return _build(signature_from_function(fn))


class _Unsupported(Exception):
    """An annotation (or part of one) has no JSON schema; the caller names the whole annotation."""


# --- building the schema -----------------------------------------------------------------------


def _build(signature: Signature) -> ToolSchema:
    fn = signature.name
    if not TOOL_NAME.fullmatch(fn):
        raise InvalidInput(
            f"the function is named {fn[:80]!r}: tool names are 1 to 64 ASCII letters, digits, _ or - "
            f"({TOOL_NAME_PATTERN}), as the providers require",
            field=SOURCE_FIELD,
        )
    if signature.is_async:
        raise InvalidInput(f"function {fn!r} is async: tools must be plain 'def' functions", field=SOURCE_FIELD)
    if not signature.docstring or not signature.docstring.strip():
        raise InvalidInput(f"function {fn!r} has no docstring", field=SOURCE_FIELD)
    try:
        docstring = docstring_parser.parse(signature.docstring)
    except docstring_parser.ParseError as exc:
        raise InvalidInput(f"the docstring of {fn!r} cannot be parsed: {exc}", field=SOURCE_FIELD) from exc
    description = (docstring.description or "").strip()
    if not description:
        raise InvalidInput(f"the docstring of {fn!r} has no description of what the tool does", field=SOURCE_FIELD)
    described = {p.arg_name: (p.description or "").strip() for p in docstring.params}

    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in signature.parameters:
        where = f"parameter {parameter.name!r} of {fn!r}"
        if parameter.name in INJECTED_PARAMETERS:
            continue
        if parameter.kind is Kind.VAR_POSITIONAL:
            raise InvalidInput(f"function {fn!r} takes *{parameter.name}: name each argument", field=SOURCE_FIELD)
        if parameter.kind is Kind.VAR_KEYWORD:
            raise InvalidInput(f"function {fn!r} takes **{parameter.name}: name each argument", field=SOURCE_FIELD)
        if parameter.kind is Kind.POSITIONAL_ONLY:
            # The model passes arguments by name, so a positional-only parameter could never be set.
            raise InvalidInput(f"{where} is positional-only (remove the '/')", field=SOURCE_FIELD)
        if parameter.annotation is None:
            raise InvalidInput(f"{where} has no annotation", field=SOURCE_FIELD)
        try:
            schema, optional = _parameter_schema(parameter.annotation)
        except _Unsupported:
            raise InvalidInput(
                f"{where} has an unsupported annotation {parameter.annotation.text!r} ({_SUPPORTED})",
                field=SOURCE_FIELD,
            ) from None
        if not described.get(parameter.name):
            raise InvalidInput(f"{where} is not described in the docstring", field=SOURCE_FIELD)
        schema["description"] = described[parameter.name]
        if parameter.default_is_literal:
            schema["default"] = parameter.default
        properties[parameter.name] = schema
        if not optional and not parameter.has_default:
            required.append(parameter.name)

    json_schema = {
        "name": fn,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }
    problem = storage_problem(json_schema)
    if problem is not None:  # e.g. list[list[list[...]]] two hundred levels deep
        raise InvalidInput(f"the schema of {fn!r} at {problem.where} {problem.reason}", field=SOURCE_FIELD)
    return ToolSchema(name=fn, description=description, json_schema=json_schema)


def _parameter_schema(annotation: Annotation) -> tuple[dict[str, Any], bool]:
    """The schema of a parameter's annotation, and whether ``Optional`` made it not required."""
    if annotation.head == "annotated" and annotation.args:
        return _parameter_schema(annotation.args[0])
    inner = _strip_none(annotation)
    if inner is not None:
        return _schema(inner), True
    return _schema(annotation), False


def _strip_none(annotation: Annotation) -> Annotation | None:
    """``X`` for ``Optional[X]`` / ``X | None`` / ``Union[X, None]``, else None."""
    if annotation.head == "optional" and len(annotation.args) == 1:
        return annotation.args[0]
    if annotation.head == "union":
        members = _flatten_union(annotation)
        others = [member for member in members if member.head != "none"]
        if len(others) == 1 and len(members) > 1:
            return others[0]
    return None


def _flatten_union(annotation: Annotation) -> list[Annotation]:
    members: list[Annotation] = []
    for member in annotation.args:
        if member.head == "union":
            members.extend(_flatten_union(member))
        elif member.head == "optional":
            members.extend([*member.args, Annotation(head="none", text="None")])
        else:
            members.append(member)
    return members


def _schema(annotation: Annotation) -> dict[str, Any]:
    head, args = annotation.head, annotation.args
    if head in _SCALARS and not args:
        return {"type": _SCALARS[head]}
    if head == "annotated" and args:
        return _schema(args[0])
    if head == "list":
        if not args:
            return {"type": "array", "items": {}}
        if len(args) == 1:
            return {"type": "array", "items": _schema(args[0])}
    if head == "dict":
        if not args:
            return {"type": "object"}
        # JSON object keys are always strings.
        if len(args) == 2 and args[0].head == "str" and not args[0].args:
            return {"type": "object", "additionalProperties": _schema(args[1])}
    if head == "literal":
        return _literal_schema(annotation.values)
    inner = _strip_none(annotation)
    if inner is not None:  # Optional nested inside a list or dict: the value may be null
        return {"anyOf": [_schema(inner), {"type": "null"}]}
    raise _Unsupported(annotation.text)


def _literal_schema(values: tuple[Any, ...]) -> dict[str, Any]:
    if not values or not all(isinstance(v, str | int | bool) for v in values):
        raise _Unsupported("Literal")
    schema: dict[str, Any] = {"enum": list(values)}
    if all(isinstance(v, str) for v in values):
        schema["type"] = "string"
    elif all(isinstance(v, bool) for v in values):
        schema["type"] = "boolean"
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        schema["type"] = "integer"
    return schema
