"""JSON schemas for tools, derived from a Python function's signature and docstring.

Two entry points share one mapping: :func:`schema_from_source` reads user source code with ``ast``
(user code is never executed in the server process) and :func:`schema_from_function` reads a live
function with ``inspect`` (for the in-process base tools). Both reduce what they read to a small
intermediate form (:class:`_Signature`, :class:`_Annotation`) and :func:`_build` turns that into the
``{"name", "description", "parameters"}`` schema the providers take, or an :class:`InvalidInput`
whose message says what to change.
"""

from __future__ import annotations

import ast
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import docstring_parser
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from nightshift.domain.limits import MAX_SOURCE_CHARS, TOOL_NAME, TOOL_NAME_PATTERN, storage_problem
from nightshift.errors import InvalidInput

_FIELD = "source_code"
_TOO_COMPLEX = "source_code is nested too deeply to read (an expression of thousands of levels); simplify it"
_SUPPORTED = "use str, int, float, bool, list, dict, Optional or Literal"
# Letta injects the agent's state into a tool that declares it; the model never supplies it.
_INJECTED_PARAMETERS = frozenset({"agent_state"})

# How annotation names are written (bare, or as ``typing.X`` / ``t.X``) -> the head they mean.
_HEADS = {
    "str": "str",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "list": "list",
    "List": "list",
    "dict": "dict",
    "Dict": "dict",
    "Optional": "optional",
    "Union": "union",
    "Literal": "literal",
    "Annotated": "annotated",
    "None": "none",
}
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
        return _build(_signature_from_ast(_function_node(source_code, name)))
    except (RecursionError, MemoryError) as exc:
        # Reading a deeply nested annotation or default (ast.unparse, literal_eval) recurses too.
        raise InvalidInput(_TOO_COMPLEX, field=_FIELD) from exc


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
        node = _function_node(source_code, None)
    except (RecursionError, MemoryError) as exc:
        raise InvalidInput(_TOO_COMPLEX, field=_FIELD) from exc
    fn = node.name
    if isinstance(node, ast.AsyncFunctionDef):
        raise InvalidInput(f"function {fn!r} is async: tools must be plain 'def' functions", field=_FIELD)
    docstring = ast.get_docstring(node, clean=True) or ""
    try:
        description = (docstring_parser.parse(docstring).description or "").strip()
    except docstring_parser.ParseError:
        description = docstring.strip()
    parameters = inlined_parameters(args_json_schema)
    signature = _signature_from_ast(node)
    names = {p.name for p in signature.parameters if p.name not in _INJECTED_PARAMETERS}
    fields = set(parameters["properties"])
    if signature.parameters and signature.parameters[-1].kind is _Kind.VAR_KEYWORD:
        names |= fields
    extra = sorted(fields - names)
    if extra:
        raise InvalidInput(f"args_json_schema has fields {extra} that are not parameters of {fn!r}", field=_ARGS_FIELD)
    unset = sorted(
        p.name
        for p in signature.parameters
        if p.name in names - fields and not p.has_default and p.kind is _Kind.KEYWORD
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


def _function_node(source_code: str, name: str | None) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The function ``name`` (or the last one) of ``source_code``, parsed; see :func:`schema_from_source`."""
    if len(source_code) > MAX_SOURCE_CHARS:
        raise InvalidInput(
            f"source_code holds {len(source_code)} characters; a tool's source takes at most {MAX_SOURCE_CHARS}",
            field=_FIELD,
        )
    try:
        module = ast.parse(source_code)
    except SyntaxError as exc:
        raise InvalidInput(f"source_code does not parse: line {exc.lineno}: {exc.msg}", field=_FIELD) from exc
    except ValueError as exc:  # e.g. NUL bytes in the source
        raise InvalidInput(f"source_code does not parse: {exc}", field=_FIELD) from exc
    except (RecursionError, MemoryError) as exc:
        # CPython's parser gives up on very deep nesting (e.g. 100,000 minus signs in a row).
        raise InvalidInput(_TOO_COMPLEX, field=_FIELD) from exc
    functions = [node for node in module.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    if name is not None:
        functions = [node for node in functions if node.name == name]
        if not functions:
            raise InvalidInput(f"source_code defines no function named {name!r}", field=_FIELD)
    elif not functions:
        raise InvalidInput("source_code defines no function", field=_FIELD)
    # The last definition wins, as it would when the module runs.
    return functions[-1]


def schema_from_function(fn: Callable[..., Any]) -> ToolSchema:
    """Build the schema of a live function (a base tool that runs in-process).

    Args:
        fn: The tool function; its annotations must resolve with ``typing.get_type_hints``.

    Returns:
        The tool's schema; its name is ``fn.__name__``.

    Raises:
        InvalidInput: (field ``source_code``) the signature or docstring cannot be described.
    """
    return _build(_signature_from_function(fn))


# --- intermediate form -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Annotation:
    """An annotation reduced to what the JSON mapping needs, whether read from ``ast`` or ``typing``."""

    head: str  # a value of _HEADS, "any", or the unsupported name as written
    args: tuple[_Annotation, ...] = ()
    values: tuple[Any, ...] = ()  # the values of a Literal
    text: str  # as the user wrote it, for messages


class _Kind(Enum):
    """How a parameter can be passed; the sandbox calls tools with keyword arguments only."""

    KEYWORD = "keyword"  # a normal or keyword-only parameter
    POSITIONAL_ONLY = "positional_only"
    VAR_POSITIONAL = "var_positional"
    VAR_KEYWORD = "var_keyword"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Parameter:
    name: str
    kind: _Kind
    annotation: _Annotation | None
    has_default: bool
    default: Any = None  # meaningful only when default_is_literal
    default_is_literal: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class _Signature:
    name: str
    is_async: bool
    docstring: str | None
    parameters: tuple[_Parameter, ...]


class _Unsupported(Exception):
    """An annotation (or part of one) has no JSON schema; the caller names the whole annotation."""


# --- reading source with ast -------------------------------------------------------------------


def _signature_from_ast(node: ast.FunctionDef | ast.AsyncFunctionDef) -> _Signature:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    # ast aligns positional defaults with the LAST positional parameters.
    first_with_default = len(positional) - len(args.defaults)
    parameters: list[_Parameter] = []
    for index, arg in enumerate(positional):
        default = args.defaults[index - first_with_default] if index >= first_with_default else None
        kind = _Kind.POSITIONAL_ONLY if index < len(args.posonlyargs) else _Kind.KEYWORD
        parameters.append(_ast_parameter(arg, kind, default))
    if args.vararg is not None:
        parameters.append(_ast_parameter(args.vararg, _Kind.VAR_POSITIONAL, None))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        parameters.append(_ast_parameter(arg, _Kind.KEYWORD, kw_default))
    if args.kwarg is not None:
        parameters.append(_ast_parameter(args.kwarg, _Kind.VAR_KEYWORD, None))
    return _Signature(
        name=node.name,
        is_async=isinstance(node, ast.AsyncFunctionDef),
        docstring=ast.get_docstring(node, clean=True),
        parameters=tuple(parameters),
    )


def _ast_parameter(arg: ast.arg, kind: _Kind, default: ast.expr | None) -> _Parameter:
    annotation = _annotation_from_ast(arg.annotation) if arg.annotation is not None else None
    if default is None:
        return _Parameter(name=arg.arg, kind=kind, annotation=annotation, has_default=False)
    try:
        value = ast.literal_eval(default)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        # Not a literal (a call, a name): the parameter is optional but its default is not shown.
        return _Parameter(name=arg.arg, kind=kind, annotation=annotation, has_default=True)
    is_json, json_value = _json_literal(value)
    return _Parameter(
        name=arg.arg,
        kind=kind,
        annotation=annotation,
        has_default=True,
        default=json_value,
        default_is_literal=is_json,
    )


def _annotation_from_ast(node: ast.expr) -> _Annotation:
    text = ast.unparse(node)
    if isinstance(node, ast.Constant):
        if node.value is None:
            return _Annotation(head="none", text=text)
        if isinstance(node.value, str):  # a quoted (forward-reference) annotation
            try:
                inner = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return _Annotation(head=node.value, text=node.value)
            return _annotation_from_ast(inner)
        return _Annotation(head=text, text=text)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        members = (_annotation_from_ast(node.left), _annotation_from_ast(node.right))
        return _Annotation(head="union", args=members, text=text)
    if isinstance(node, ast.Subscript):
        head = _ast_head(node.value)
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "literal":
            try:
                values = tuple(ast.literal_eval(element) for element in elements)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return _Annotation(head=text, text=text)
            return _Annotation(head="literal", values=values, text=text)
        return _Annotation(head=head, args=tuple(_annotation_from_ast(e) for e in elements), text=text)
    return _Annotation(head=_ast_head(node), text=text)


def _ast_head(node: ast.expr) -> str:
    # ``typing.List`` and ``t.List`` mean ``List``: the attribute name is what matters.
    if isinstance(node, ast.Name):
        written = node.id
    elif isinstance(node, ast.Attribute):
        written = node.attr
    else:
        return ast.unparse(node)
    if written == "Any":
        return "any"
    return _HEADS.get(written, written)


# --- reading a live function with inspect ------------------------------------------------------


def _signature_from_function(fn: Callable[..., Any]) -> _Signature:
    name = getattr(fn, "__name__", repr(fn))
    try:
        hints = _resolved_hints(fn)
        signature = inspect.signature(fn)
    except (NameError, TypeError, ValueError) as exc:
        raise InvalidInput(f"the signature of {name!r} cannot be read: {exc}", field=_FIELD) from exc
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: _Kind.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD: _Kind.KEYWORD,
        inspect.Parameter.KEYWORD_ONLY: _Kind.KEYWORD,
        inspect.Parameter.VAR_POSITIONAL: _Kind.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD: _Kind.VAR_KEYWORD,
    }
    parameters: list[_Parameter] = []
    for parameter in signature.parameters.values():
        annotation = _annotation_from_type(hints[parameter.name]) if parameter.name in hints else None
        has_default = parameter.default is not inspect.Parameter.empty
        is_json, json_value = _json_literal(parameter.default) if has_default else (False, None)
        parameters.append(
            _Parameter(
                name=parameter.name,
                kind=kinds[parameter.kind],
                annotation=annotation,
                has_default=has_default,
                default=json_value,
                default_is_literal=is_json,
            )
        )
    return _Signature(
        name=name,
        # In-process base tools may be coroutines; only user source must be a plain def.
        is_async=False,
        docstring=inspect.getdoc(fn),
        parameters=tuple(parameters),
    )


def _resolved_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``typing.get_type_hints(fn)`` without the injected parameters.

    Their types (an agent state class) may exist only for type checkers, and the schema never
    shows them, so they are not resolved at all.
    """
    annotations = {
        name: value
        for name, value in getattr(fn, "__annotations__", {}).items()
        if name not in _INJECTED_PARAMETERS and name != "return"
    }
    holder = types.SimpleNamespace(
        __annotations__=annotations, __globals__=getattr(inspect.unwrap(fn), "__globals__", {})
    )
    return typing.get_type_hints(holder)


def _annotation_from_type(tp: Any) -> _Annotation:
    text = _type_text(tp)
    if tp is None or tp is type(None):
        return _Annotation(head="none", text=text)
    if tp is Any:
        return _Annotation(head="any", text=text)
    if tp in (str, int, float, bool, list, dict):
        return _Annotation(head=tp.__name__, text=text)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return _Annotation(head="literal", values=args, text=text)
    if origin is typing.Annotated:
        return _annotation_from_type(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return _Annotation(head="union", args=tuple(_annotation_from_type(a) for a in args), text=text)
    if origin in (list, dict):
        return _Annotation(head=origin.__name__, args=tuple(_annotation_from_type(a) for a in args), text=text)
    return _Annotation(head=text, text=text)


def _type_text(tp: Any) -> str:
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__name__
    return repr(tp).replace("typing.", "")


# --- building the schema -----------------------------------------------------------------------


def _build(signature: _Signature) -> ToolSchema:
    fn = signature.name
    if not TOOL_NAME.fullmatch(fn):
        raise InvalidInput(
            f"the function is named {fn[:80]!r}: tool names are 1 to 64 ASCII letters, digits, _ or - "
            f"({TOOL_NAME_PATTERN}), as the providers require",
            field=_FIELD,
        )
    if signature.is_async:
        raise InvalidInput(f"function {fn!r} is async: tools must be plain 'def' functions", field=_FIELD)
    if not signature.docstring or not signature.docstring.strip():
        raise InvalidInput(f"function {fn!r} has no docstring", field=_FIELD)
    try:
        docstring = docstring_parser.parse(signature.docstring)
    except docstring_parser.ParseError as exc:
        raise InvalidInput(f"the docstring of {fn!r} cannot be parsed: {exc}", field=_FIELD) from exc
    description = (docstring.description or "").strip()
    if not description:
        raise InvalidInput(f"the docstring of {fn!r} has no description of what the tool does", field=_FIELD)
    described = {p.arg_name: (p.description or "").strip() for p in docstring.params}

    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in signature.parameters:
        where = f"parameter {parameter.name!r} of {fn!r}"
        if parameter.name in _INJECTED_PARAMETERS:
            continue
        if parameter.kind is _Kind.VAR_POSITIONAL:
            raise InvalidInput(f"function {fn!r} takes *{parameter.name}: name each argument", field=_FIELD)
        if parameter.kind is _Kind.VAR_KEYWORD:
            raise InvalidInput(f"function {fn!r} takes **{parameter.name}: name each argument", field=_FIELD)
        if parameter.kind is _Kind.POSITIONAL_ONLY:
            # The model passes arguments by name, so a positional-only parameter could never be set.
            raise InvalidInput(f"{where} is positional-only (remove the '/')", field=_FIELD)
        if parameter.annotation is None:
            raise InvalidInput(f"{where} has no annotation", field=_FIELD)
        try:
            schema, optional = _parameter_schema(parameter.annotation)
        except _Unsupported:
            raise InvalidInput(
                f"{where} has an unsupported annotation {parameter.annotation.text!r} ({_SUPPORTED})",
                field=_FIELD,
            ) from None
        if not described.get(parameter.name):
            raise InvalidInput(f"{where} is not described in the docstring", field=_FIELD)
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
        raise InvalidInput(f"the schema of {fn!r} at {problem.where} {problem.reason}", field=_FIELD)
    return ToolSchema(name=fn, description=description, json_schema=json_schema)


def _parameter_schema(annotation: _Annotation) -> tuple[dict[str, Any], bool]:
    """The schema of a parameter's annotation, and whether ``Optional`` made it not required."""
    if annotation.head == "annotated" and annotation.args:
        return _parameter_schema(annotation.args[0])
    inner = _strip_none(annotation)
    if inner is not None:
        return _schema(inner), True
    return _schema(annotation), False


def _strip_none(annotation: _Annotation) -> _Annotation | None:
    """``X`` for ``Optional[X]`` / ``X | None`` / ``Union[X, None]``, else None."""
    if annotation.head == "optional" and len(annotation.args) == 1:
        return annotation.args[0]
    if annotation.head == "union":
        members = _flatten_union(annotation)
        others = [member for member in members if member.head != "none"]
        if len(others) == 1 and len(members) > 1:
            return others[0]
    return None


def _flatten_union(annotation: _Annotation) -> list[_Annotation]:
    members: list[_Annotation] = []
    for member in annotation.args:
        if member.head == "union":
            members.extend(_flatten_union(member))
        elif member.head == "optional":
            members.extend([*member.args, _Annotation(head="none", text="None")])
        else:
            members.append(member)
    return members


def _schema(annotation: _Annotation) -> dict[str, Any]:
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


def _json_literal(value: Any) -> tuple[bool, Any]:
    """Whether ``value`` can be shown as a JSON default, and its JSON form (tuples become lists)."""
    if value is None or isinstance(value, str | bool | int):
        return True, value
    if isinstance(value, float):
        return math.isfinite(value), value
    if isinstance(value, list | tuple):
        items = [_json_literal(item) for item in value]
        return all(ok for ok, _ in items), [item for _, item in items]
    if isinstance(value, dict):
        entries = {key: _json_literal(item) for key, item in value.items()}
        ok = all(isinstance(key, str) and item_ok for key, (item_ok, _) in entries.items())
        return ok, {key: item for key, (_, item) in entries.items()}
    return False, None
