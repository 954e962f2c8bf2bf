"""What nightshift accepts: size limits of what the API takes, and what text and JSON can be stored.

The limits are set so that a real user does not meet them by accident, and so that everything
accepted fits the database columns (names are ``String(255)``, integers 32 or 64 bits) and the
providers' requests. README.md ("Limits") lists them for users.

Text and JSON must also survive both databases and the JSON encoder: PostgreSQL's TEXT and JSONB
cannot hold a NUL character, a lone UTF-16 surrogate (``"\\ud800"`` in JSON) is not UTF-8, and
integers past 64 bits, NaN, Infinity or very deep nesting cannot be encoded. SQLite would take
some of them, so they are refused everywhere, the same on both databases: :func:`storage_problem`
finds the first such value in anything a request carries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

# Names: agent names, block labels, tags, model handles, embeddings (the columns are String(255)).
MAX_NAME_CHARS: Final = 255
# Long texts: a system prompt, a block's value (and so its limit), a description, a tool's source.
MAX_TEXT_CHARS: Final = 1_000_000
MAX_SOURCE_CHARS: Final = 1_000_000
MAX_BLOCK_LIMIT: Final = MAX_TEXT_CHARS
# A block's character limit when none is given: Letta's (CORE_MEMORY_BLOCK_CHAR_LIMIT).
DEFAULT_BLOCK_LIMIT: Final = 20_000
# Tags of one agent or tool.
MAX_TAGS: Final = 100
# Ids or names in one list of a request (tool_ids, block_ids, tools, memory_blocks, tool_rules).
MAX_LIST_ITEMS: Final = 1000
# Content parts of one message of an agent's initial_message_sequence.
MAX_MESSAGE_PARTS: Final = 100
# The text of the messages of one synchronous request (POST /v1/agents/{id}/messages).
MAX_MESSAGE_CHARS: Final = 1_000_000
# Model limits, in tokens: larger than any model's today, small enough for the columns.
MAX_CONTEXT_WINDOW: Final = 10_000_000
MAX_OUTPUT_TOKENS: Final = 1_000_000
# Characters of a tool's result shown to the model.
MAX_RETURN_CHARS: Final = 1_000_000
# Steps of one agent in one run (a request's max_steps; a max_count_per_step rule's limit).
MAX_STEPS: Final = 1000
# A request body, in MB, unless NIGHTSHIFT_MAX_REQUEST_MB says otherwise; batch runs take more
# (their messages may hold 100 MB of text, see batch/steps.py), up to MAX_BATCH_REQUEST_MB.
DEFAULT_MAX_REQUEST_MB: Final = 32
MAX_BATCH_REQUEST_MB: Final = 256
# The JSON values (strings, numbers, keys, arrays, objects...) of one request body, unless
# NIGHTSHIFT_MAX_REQUEST_VALUES says otherwise. Decoding JSON is C code that holds the interpreter
# (and so the event loop) for the whole body, however it is run: what it costs grows with the
# number of values, not the bytes (a long text is one value), so this bounds it.
DEFAULT_MAX_REQUEST_VALUES: Final = 1_000_000
# A batch run's body may hold more: the requests of 100,000 agents, a message or two each. (Such
# a body's decoding and validation still hold the loop, once, for the caller's own run.)
MAX_BATCH_REQUEST_VALUES: Final = 2_500_000
# How long reading a custom tool's source and schemas may take, in seconds, unless
# NIGHTSHIFT_TOOL_READ_SECONDS says otherwise: a source of the largest size parses well within it,
# even on a slow machine (see tools/reading.py).
DEFAULT_TOOL_READ_SECONDS: Final = 10.0
# The nodes (objects, arrays and their members) of a tool's JSON schema, given by a client
# (json_schema, args_json_schema): checking a schema against its metaschema is slow Python.
MAX_SCHEMA_NODES: Final = 10_000

# Tool names as both providers take them (Anthropic's and OpenAI's function-name pattern).
TOOL_NAME_PATTERN: Final = r"^[a-zA-Z0-9_-]{1,64}$"
TOOL_NAME = re.compile(TOOL_NAME_PATTERN)

# Nesting of JSON a request carries (metadata, a tool's json_schema): the JSON encoder stops at 255.
MAX_JSON_DEPTH: Final = 64
_INT64 = (-(2**63), 2**63 - 1)
# A NUL character or a lone surrogate.
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageProblem:
    """Why a value cannot be stored, and where it is (``path``: keys and indexes from the top)."""

    path: tuple[str | int, ...]
    reason: str

    @property
    def where(self) -> str:
        """The path as ``metadata.notes.0``, or ``""`` for the value itself.

        Keys that do not print (a NUL, a lone surrogate) are shown escaped, and a path past 120
        characters is shortened, so the path itself can always be sent back in an error.
        """
        text = ".".join(part if isinstance(part, str) and part.isprintable() else _escaped(part) for part in self.path)
        return text if len(text) <= 120 else f"{text[:117]}..."


def _escaped(part: str | int) -> str:
    return str(part) if isinstance(part, int) else ascii(part)


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored (a NUL character or a lone surrogate), or None."""
    found = _UNSTORABLE_CHAR.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"holds a NUL character (\\u0000) at position {found.start()}, which cannot be stored"
    return (
        f"holds a lone UTF-16 surrogate (\\u{ord(found.group()):04x}) at position {found.start()}, "
        "which is not valid Unicode"
    )


def storage_problem(value: object) -> StorageProblem | None:
    """The first part of ``value`` that cannot be stored, or None when all of it can.

    ``value`` is what a request carried, decoded: strings, numbers, booleans, None, lists,
    tuples and mappings of those (pydantic models are walked through their fields). Strings
    (mapping keys too) must hold no NUL character and no lone surrogate; integers must fit in 64
    bits; numbers must be finite; nesting must stay within ``MAX_JSON_DEPTH``.
    """
    if _all_storable(value):
        return None
    for path, item in _walk(value):
        reason = _scalar_problem(item) if len(path) <= MAX_JSON_DEPTH else None
        if len(path) > MAX_JSON_DEPTH:
            reason = f"is nested more than {MAX_JSON_DEPTH} levels deep"
        if reason is not None:
            return StorageProblem(path=path, reason=reason)
    return None


def _scalar_problem(item: object) -> str | None:
    if isinstance(item, str):
        return text_problem(item)
    if isinstance(item, bool) or item is None:
        return None
    if isinstance(item, int):
        if not _INT64[0] <= item <= _INT64[1]:
            return "is an integer out of the 64-bit range"
        return None
    if isinstance(item, float) and not math.isfinite(item):
        return "is not a finite number (NaN and Infinity are not JSON)"
    return None


def _all_storable(value: object) -> bool:
    """Whether ``storage_problem`` finds nothing in ``value``: the same checks without building
    every part's path, faster for the common case (a large batch run's body is checked while its
    request handling holds the event loop)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return False
        depth += 1
        if isinstance(item, str):
            if _UNSTORABLE_CHAR.search(item) is not None:
                return False
        elif item is None or isinstance(item, bool):
            continue
        elif isinstance(item, int | float):
            if _scalar_problem(item) is not None:
                return False
        elif isinstance(item, Mapping):
            for key, child in item.items():
                stack.append((key, depth))
                stack.append((child, depth))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth) for child in item)
        elif (fields := _model_fields(item)) is not None:
            stack.extend((child, depth) for child in fields.values())
    return True


def _walk(value: object) -> Iterator[tuple[tuple[str | int, ...], object]]:
    """Every value inside ``value`` with its path, depth first; keys are yielded as values too.

    Iterative, so that no nesting (refused past ``MAX_JSON_DEPTH``) can exhaust the stack.
    """
    stack: list[tuple[tuple[str | int, ...], object]] = [((), value)]
    while stack:
        path, item = stack.pop()
        yield path, item
        if len(path) > MAX_JSON_DEPTH:
            continue
        children: list[tuple[tuple[str | int, ...], object]] = []
        if isinstance(item, Mapping):
            for key, child in item.items():
                where = (*path, key if isinstance(key, str | int) else str(key))
                children.append((where, key))
                children.append((where, child))
        elif isinstance(item, list | tuple):
            children.extend(((*path, index), child) for index, child in enumerate(item))
        else:
            fields = _model_fields(item)
            if fields is not None:
                children.extend(((*path, name), child) for name, child in fields.items())
        stack.extend(reversed(children))


def _model_fields(item: object) -> dict[str, object] | None:
    # A pydantic model (duck-typed, so the domain does not depend on pydantic here).
    fields = getattr(type(item), "model_fields", None)
    if not isinstance(fields, dict):
        return None
    return {name: getattr(item, name, None) for name in fields}


# The bytes that open a JSON value or separate two (outside strings): each value of a body but the
# first follows one of them, so their count (plus one) bounds the number of values.
_SEPARATORS = (b",", b":", b"[", b"{")
_SCAN_CHUNK = 1024 * 1024


def json_values_over(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` holds more than ``limit`` values, counted without decoding it.

    Each value but the first (keys count as values) follows a ``,``, a ``:`` or an opening bracket,
    outside strings: the count of those is the bound (an empty array or object counts one). The
    bytes are counted in slices first, a bound that counts separators inside strings too; only a
    body over the limit that way (a long text full of commas, say) is gone through string by
    string, which stops as soon as the count passes the limit. Every step is a short call into C,
    so on a thread the event loop gets its turns meanwhile. A body that is not JSON at all gets
    some count: the decoder refuses it afterwards.
    """
    rough = 1
    for start in range(0, len(body), _SCAN_CHUNK):
        end = start + _SCAN_CHUNK
        rough += sum(body.count(separator, start, end) for separator in _SEPARATORS)
    if rough <= limit:
        return False
    return _exact_values_over(body, limit)


def _exact_values_over(body: bytes, limit: int) -> bool:
    count = 1
    position = 0
    while True:
        quote = body.find(b'"', position)
        stop = len(body) if quote < 0 else quote
        # The separators between the previous string and this one, a stretch without text.
        count += sum(body.count(separator, position, stop) for separator in _SEPARATORS)
        if count > limit:
            return True
        if quote < 0:
            return False
        closing = _closing_quote(body, quote)
        if closing < 0:
            return False  # an unterminated string: not JSON, the decoder says so
        position = closing + 1


def _closing_quote(body: bytes, opening: int) -> int:
    """The index of the quote that ends the string opened at ``opening``, or -1."""
    search = opening + 1
    while True:
        quote = body.find(b'"', search)
        if quote < 0:
            return -1
        backslashes = 0
        while body[quote - 1 - backslashes] == 0x5C:  # "\\"
            backslashes += 1
        if backslashes % 2 == 0:  # the quote itself is not escaped
            return quote
        search = quote + 1


def schema_nodes_over(schema: object, limit: int = MAX_SCHEMA_NODES) -> bool:
    """Whether the decoded JSON ``schema`` has more than ``limit`` nodes (every value, at any depth).

    Stops as soon as the count passes the limit, so it costs at most ``limit`` steps.
    """
    count = 0
    stack: list[object] = [schema]
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False
