"""A tool function's signature, read without running it: from its source with ``ast`` (user code
never runs in the server process) or from a live function with ``inspect`` (the in-process base
tools). Both are reduced to one small form (``Signature``, ``Parameter``, ``Annotation``) that
``tools.schema`` turns into the JSON schema the providers take.
"""

from __future__ import annotations

import ast
import inspect
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from nightshift.domain.limits import MAX_SOURCE_CHARS
from nightshift.errors import InvalidInput

SOURCE_FIELD = "source_code"
TOO_COMPLEX = "source_code is nested too deeply to read (an expression of thousands of levels); simplify it"
# Letta injects the agent's state into a tool that declares it; the model never supplies it.
INJECTED_PARAMETERS = frozenset({"agent_state"})

# How annotation names are written (bare, or as ``typing.X`` / ``t.X``) -> the head they mean.
HEADS = {
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

# --- intermediate form -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Annotation:
    """An annotation reduced to what the JSON mapping needs, whether read from ``ast`` or ``typing``."""

    head: str  # a value of HEADS, "any", or the unsupported name as written
    args: tuple[Annotation, ...] = ()
    values: tuple[Any, ...] = ()  # the values of a Literal
    text: str  # as the user wrote it, for messages


class Kind(Enum):
    """How a parameter can be passed; the sandbox calls tools with keyword arguments only."""

    KEYWORD = "keyword"  # a normal or keyword-only parameter
    POSITIONAL_ONLY = "positional_only"
    VAR_POSITIONAL = "var_positional"
    VAR_KEYWORD = "var_keyword"


@dataclass(frozen=True, slots=True, kw_only=True)
class Parameter:
    name: str
    kind: Kind
    annotation: Annotation | None
    has_default: bool
    default: Any = None  # meaningful only when default_is_literal
    default_is_literal: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    name: str
    is_async: bool
    docstring: str | None
    parameters: tuple[Parameter, ...]


def function_node(source_code: str, name: str | None) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The function ``name`` (or the last one) of ``source_code``, parsed; see :func:`schema_from_source`."""
    if len(source_code) > MAX_SOURCE_CHARS:
        raise InvalidInput(
            f"source_code holds {len(source_code)} characters; a tool's source takes at most {MAX_SOURCE_CHARS}",
            field=SOURCE_FIELD,
        )
    try:
        module = ast.parse(source_code)
    except SyntaxError as exc:
        raise InvalidInput(f"source_code does not parse: line {exc.lineno}: {exc.msg}", field=SOURCE_FIELD) from exc
    except ValueError as exc:  # e.g. NUL bytes in the source
        raise InvalidInput(f"source_code does not parse: {exc}", field=SOURCE_FIELD) from exc
    except (RecursionError, MemoryError) as exc:
        # CPython's parser gives up on very deep nesting (e.g. 100,000 minus signs in a row).
        raise InvalidInput(TOO_COMPLEX, field=SOURCE_FIELD) from exc
    functions = [node for node in module.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    if name is not None:
        functions = [node for node in functions if node.name == name]
        if not functions:
            raise InvalidInput(f"source_code defines no function named {name!r}", field=SOURCE_FIELD)
    elif not functions:
        raise InvalidInput("source_code defines no function", field=SOURCE_FIELD)
    # The last definition wins, as it would when the module runs.
    return functions[-1]


# --- reading source with ast -------------------------------------------------------------------


def signature_from_ast(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Signature:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    # ast aligns positional defaults with the LAST positional parameters.
    first_with_default = len(positional) - len(args.defaults)
    parameters: list[Parameter] = []
    for index, arg in enumerate(positional):
        default = args.defaults[index - first_with_default] if index >= first_with_default else None
        kind = Kind.POSITIONAL_ONLY if index < len(args.posonlyargs) else Kind.KEYWORD
        parameters.append(_ast_parameter(arg, kind, default))
    if args.vararg is not None:
        parameters.append(_ast_parameter(args.vararg, Kind.VAR_POSITIONAL, None))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        parameters.append(_ast_parameter(arg, Kind.KEYWORD, kw_default))
    if args.kwarg is not None:
        parameters.append(_ast_parameter(args.kwarg, Kind.VAR_KEYWORD, None))
    return Signature(
        name=node.name,
        is_async=isinstance(node, ast.AsyncFunctionDef),
        docstring=ast.get_docstring(node, clean=True),
        parameters=tuple(parameters),
    )


def _ast_parameter(arg: ast.arg, kind: Kind, default: ast.expr | None) -> Parameter:
    annotation = _annotation_from_ast(arg.annotation) if arg.annotation is not None else None
    if default is None:
        return Parameter(name=arg.arg, kind=kind, annotation=annotation, has_default=False)
    try:
        value = ast.literal_eval(default)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        # Not a literal (a call, a name): the parameter is optional but its default is not shown.
        return Parameter(name=arg.arg, kind=kind, annotation=annotation, has_default=True)
    is_json, json_value = json_literal(value)
    return Parameter(
        name=arg.arg,
        kind=kind,
        annotation=annotation,
        has_default=True,
        default=json_value,
        default_is_literal=is_json,
    )


def _annotation_from_ast(node: ast.expr) -> Annotation:
    text = ast.unparse(node)
    if isinstance(node, ast.Constant):
        if node.value is None:
            return Annotation(head="none", text=text)
        if isinstance(node.value, str):  # a quoted (forward-reference) annotation
            try:
                inner = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return Annotation(head=node.value, text=node.value)
            return _annotation_from_ast(inner)
        return Annotation(head=text, text=text)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        members = (_annotation_from_ast(node.left), _annotation_from_ast(node.right))
        return Annotation(head="union", args=members, text=text)
    if isinstance(node, ast.Subscript):
        head = _ast_head(node.value)
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "literal":
            try:
                values = tuple(ast.literal_eval(element) for element in elements)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return Annotation(head=text, text=text)
            return Annotation(head="literal", values=values, text=text)
        return Annotation(head=head, args=tuple(_annotation_from_ast(e) for e in elements), text=text)
    return Annotation(head=_ast_head(node), text=text)


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
    return HEADS.get(written, written)


# --- reading a live function with inspect ------------------------------------------------------


def signature_from_function(fn: Callable[..., Any]) -> Signature:
    name = getattr(fn, "__name__", repr(fn))
    try:
        hints = _resolved_hints(fn)
        signature = inspect.signature(fn)
    except (NameError, TypeError, ValueError) as exc:
        raise InvalidInput(f"the signature of {name!r} cannot be read: {exc}", field=SOURCE_FIELD) from exc
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: Kind.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD: Kind.KEYWORD,
        inspect.Parameter.KEYWORD_ONLY: Kind.KEYWORD,
        inspect.Parameter.VAR_POSITIONAL: Kind.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD: Kind.VAR_KEYWORD,
    }
    parameters: list[Parameter] = []
    for parameter in signature.parameters.values():
        annotation = _annotation_from_type(hints[parameter.name]) if parameter.name in hints else None
        has_default = parameter.default is not inspect.Parameter.empty
        is_json, json_value = json_literal(parameter.default) if has_default else (False, None)
        parameters.append(
            Parameter(
                name=parameter.name,
                kind=kinds[parameter.kind],
                annotation=annotation,
                has_default=has_default,
                default=json_value,
                default_is_literal=is_json,
            )
        )
    return Signature(
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
        if name not in INJECTED_PARAMETERS and name != "return"
    }
    holder = types.SimpleNamespace(
        __annotations__=annotations, __globals__=getattr(inspect.unwrap(fn), "__globals__", {})
    )
    return typing.get_type_hints(holder)


def _annotation_from_type(tp: Any) -> Annotation:
    text = _type_text(tp)
    if tp is None or tp is type(None):
        return Annotation(head="none", text=text)
    if tp is Any:
        return Annotation(head="any", text=text)
    if tp in (str, int, float, bool, list, dict):
        return Annotation(head=tp.__name__, text=text)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return Annotation(head="literal", values=args, text=text)
    if origin is typing.Annotated:
        return _annotation_from_type(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return Annotation(head="union", args=tuple(_annotation_from_type(a) for a in args), text=text)
    if origin in (list, dict):
        return Annotation(head=origin.__name__, args=tuple(_annotation_from_type(a) for a in args), text=text)
    return Annotation(head=text, text=text)


def _type_text(tp: Any) -> str:
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__name__
    return repr(tp).replace("typing.", "")


def json_literal(value: Any) -> tuple[bool, Any]:
    """Whether ``value`` can be shown as a JSON default, and its JSON form (tuples become lists)."""
    if value is None or isinstance(value, str | bool | int):
        return True, value
    if isinstance(value, float):
        return math.isfinite(value), value
    if isinstance(value, list | tuple):
        items = [json_literal(item) for item in value]
        return all(ok for ok, _ in items), [item for _, item in items]
    if isinstance(value, dict):
        entries = {key: json_literal(item) for key, item in value.items()}
        ok = all(isinstance(key, str) and item_ok for key, (item_ok, _) in entries.items())
        return ok, {key: item for key, (_, item) in entries.items()}
    return False, None
