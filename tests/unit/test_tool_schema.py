"""JSON schemas built from tool source code and from live functions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import pytest

from nightshift.errors import InvalidInput
from nightshift.tools.schema import schema_from_function, schema_from_source

GOOGLE = '''
from typing import List, Literal, Optional


def search(
    query: str,
    tags: list[str],
    ids: List[int],
    weights: dict[str, float],
    mode: Literal["fast", "exact"] = "fast",
    limit: int = 10,
    exact: bool = False,
    cutoff: float = 0.5,
    owner: Optional[str] = None,
    after: str | None = None,
) -> str:
    """Search the archive.

    Matches are ranked by score.

    Args:
        query: What to look for.
        tags: Tags a match must carry.
        ids: Documents to search in.
        weights: Per-field weights.
        mode: How hard to look.
        limit: Most results to return.
        exact: Match whole words only.
        cutoff: Lowest score kept.
        owner: Only documents of this owner.
        after: Only documents newer than this date.

    Returns:
        The matches, one a line.
    """
    return ""
'''

NUMPY = '''
def scale(value: float, factor: int = 2) -> float:
    """Scale a value.

    Parameters
    ----------
    value : float
        The number to scale.
    factor : int
        How many times larger.

    Returns
    -------
    float
        The scaled value.
    """
    return value * factor
'''

REST = '''
def greet(name: str, loud: bool = False) -> str:
    """Greet someone.

    :param name: Who to greet.
    :param loud: Shout the greeting.
    :returns: The greeting.
    """
    return name
'''


def _parameters(source: str, **kwargs: str) -> dict[str, Any]:
    parameters = schema_from_source(source, **kwargs).json_schema["parameters"]
    assert isinstance(parameters, dict)
    return parameters


def _error(source: str, **kwargs: str) -> str:
    with pytest.raises(InvalidInput) as caught:
        schema_from_source(source, **kwargs)
    assert caught.value.field == "source_code"
    return caught.value.message


def test_google_docstring_and_every_supported_annotation() -> None:
    schema = schema_from_source(GOOGLE)

    assert schema.name == "search"
    assert schema.description == "Search the archive.\n\nMatches are ranked by score."
    assert schema.json_schema["name"] == "search"
    assert schema.json_schema["description"] == schema.description
    assert schema.json_schema["parameters"] == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags a match must carry."},
            "ids": {"type": "array", "items": {"type": "integer"}, "description": "Documents to search in."},
            "weights": {
                "type": "object",
                "additionalProperties": {"type": "number"},
                "description": "Per-field weights.",
            },
            "mode": {
                "enum": ["fast", "exact"],
                "type": "string",
                "description": "How hard to look.",
                "default": "fast",
            },
            "limit": {"type": "integer", "description": "Most results to return.", "default": 10},
            "exact": {"type": "boolean", "description": "Match whole words only.", "default": False},
            "cutoff": {"type": "number", "description": "Lowest score kept.", "default": 0.5},
            "owner": {"type": "string", "description": "Only documents of this owner.", "default": None},
            "after": {
                "type": "string",
                "description": "Only documents newer than this date.",
                "default": None,
            },
        },
        "required": ["query", "tags", "ids", "weights"],
    }


def test_numpy_docstring() -> None:
    schema = schema_from_source(NUMPY)

    assert schema.description == "Scale a value."
    assert schema.json_schema["parameters"] == {
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "The number to scale."},
            "factor": {"type": "integer", "description": "How many times larger.", "default": 2},
        },
        "required": ["value"],
    }


def test_rest_docstring() -> None:
    parameters = _parameters(REST)

    assert parameters["properties"] == {
        "name": {"type": "string", "description": "Who to greet."},
        "loud": {"type": "boolean", "description": "Shout the greeting.", "default": False},
    }
    assert parameters["required"] == ["name"]


def test_optional_without_default_is_not_required() -> None:
    source = '''
import typing

def f(a: typing.Optional[int], b: "int | None", c: typing.Union[None, str]) -> None:
    """Do it.

    Args:
        a: First.
        b: Second.
        c: Third.
    """
'''
    parameters = _parameters(source)

    assert parameters["properties"] == {
        "a": {"type": "integer", "description": "First."},
        "b": {"type": "integer", "description": "Second."},
        "c": {"type": "string", "description": "Third."},
    }
    assert parameters["required"] == []


def test_bare_containers_nested_optional_and_literal_kinds() -> None:
    source = '''
from typing import Dict, Literal, Optional

def f(
    a: list,
    b: Dict,
    c: list[Optional[int]],
    d: Literal[1, 2],
    e: list[dict[str, list[bool]]],
    *,
    f: list[int] = (1, 2),
    g: str = "x".upper(),
) -> None:
    """Do it.

    Args:
        a: A.
        b: B.
        c: C.
        d: D.
        e: E.
        f: F.
        g: G.
    """
'''
    properties = _parameters(source)["properties"]

    assert properties["a"] == {"type": "array", "items": {}, "description": "A."}
    assert properties["b"] == {"type": "object", "description": "B."}
    assert properties["c"]["items"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert properties["d"] == {"enum": [1, 2], "type": "integer", "description": "D."}
    assert properties["e"]["items"] == {
        "type": "object",
        "additionalProperties": {"type": "array", "items": {"type": "boolean"}},
    }
    # A tuple default is shown as the JSON array it becomes; a computed default is not shown.
    assert properties["f"]["default"] == [1, 2]
    assert "default" not in properties["g"]
    assert _parameters(source)["required"] == ["a", "b", "c", "d", "e"]


def test_agent_state_is_injected_not_described() -> None:
    source = '''
def remember(agent_state: "AgentState", fact: str) -> None:
    """Remember a fact.

    Args:
        fact: The fact.
    """
'''
    parameters = _parameters(source)

    assert list(parameters["properties"]) == ["fact"]
    assert parameters["required"] == ["fact"]


def test_picks_the_last_function_unless_named() -> None:
    source = '''
def helper(x: int) -> int:
    """Help.

    Args:
        x: A number.
    """
    return x


def main_tool(y: str) -> str:
    """The tool.

    Args:
        y: A string.
    """
    return y
'''
    assert schema_from_source(source).name == "main_tool"
    assert schema_from_source(source, name="helper").name == "helper"


def test_function_with_no_parameters() -> None:
    schema = schema_from_source('def ping() -> str:\n    """Say pong."""\n    return "pong"\n')

    assert schema.json_schema == {
        "name": "ping",
        "description": "Say pong.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    }


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(:\n    pass\n", "source_code does not parse: line 1: invalid syntax"),
        ("x = 1\n", "source_code defines no function"),
        ("def f(x: int):\n    return x\n", "function 'f' has no docstring"),
        (
            'async def f(x: int):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "function 'f' is async: tools must be plain 'def' functions",
        ),
        (
            'def f(x):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "parameter 'x' of 'f' has no annotation",
        ),
        (
            'def f(x: set[int]):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "parameter 'x' of 'f' has an unsupported annotation 'set[int]' "
            "(use str, int, float, bool, list, dict, Optional or Literal)",
        ),
        (
            'from typing import Any\ndef f(x: Any):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "parameter 'x' of 'f' has an unsupported annotation 'Any' "
            "(use str, int, float, bool, list, dict, Optional or Literal)",
        ),
        (
            'def f(x: int | str):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "parameter 'x' of 'f' has an unsupported annotation 'int | str' "
            "(use str, int, float, bool, list, dict, Optional or Literal)",
        ),
        (
            'def f(x: dict[int, str]):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "parameter 'x' of 'f' has an unsupported annotation 'dict[int, str]' "
            "(use str, int, float, bool, list, dict, Optional or Literal)",
        ),
        (
            'def f(x: int, y: int):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "parameter 'y' of 'f' is not described in the docstring",
        ),
        (
            'def f(*args: int):\n    """Do.\n\n    Args:\n        args: X.\n    """\n',
            "function 'f' takes *args: name each argument",
        ),
        (
            'def f(**kwargs: int):\n    """Do.\n\n    Args:\n        kwargs: X.\n    """\n',
            "function 'f' takes **kwargs: name each argument",
        ),
        (
            'def f(x: int, /):\n    """Do.\n\n    Args:\n        x: X.\n    """\n',
            "parameter 'x' of 'f' is positional-only (remove the '/')",
        ),
        (
            'def f(x: int):\n    """:param x: X."""\n',
            "the docstring of 'f' has no description of what the tool does",
        ),
    ],
)
def test_errors_say_what_to_fix(source: str, message: str) -> None:
    assert _error(source) == message


def test_unknown_function_name() -> None:
    assert _error(REST, name="wave") == "source_code defines no function named 'wave'"


def test_source_is_never_executed() -> None:
    source = '''
raise SystemExit("the server must not run this")

def f(x: int) -> int:
    """Do.

    Args:
        x: X.
    """
    return x
'''
    assert schema_from_source(source).name == "f"


if TYPE_CHECKING:
    from collections.abc import Mapping as AgentState  # a name only type checkers see


def _lookup(
    agent_state: AgentState[str, str],
    key: str,
    scope: Literal["all", "mine"] = "all",
    limit: int | None = None,
) -> list[str]:
    """Look a key up.

    Args:
        key: The key.
        scope: Whose entries.
        limit: At most this many.
    """
    return [key]


def test_schema_from_function_matches_the_source_path() -> None:
    schema = schema_from_function(_lookup)

    assert schema.name == "_lookup"
    assert schema.description == "Look a key up."
    assert schema.json_schema["parameters"] == {
        "type": "object",
        "properties": {
            "key": {"type": "string", "description": "The key."},
            "scope": {"enum": ["all", "mine"], "type": "string", "description": "Whose entries.", "default": "all"},
            "limit": {"type": "integer", "description": "At most this many.", "default": None},
        },
        "required": ["key"],
    }


def test_schema_from_function_errors() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]  # unannotated on purpose: what the schema refuses
        """Do.

        Args:
            x: X.
        """

    def sets(x: set[int]) -> None:
        """Do.

        Args:
            x: X.
        """

    with pytest.raises(InvalidInput, match="parameter 'x' of 'untyped' has no annotation"):
        schema_from_function(untyped)
    with pytest.raises(InvalidInput, match=r"unsupported annotation 'set\[int\]'"):
        schema_from_function(sets)
