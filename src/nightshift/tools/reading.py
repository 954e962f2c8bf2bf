"""Reading a custom tool (its source, and the schemas a client gives) in a child process, with a
time limit.

Parsing Python (``ast.parse``) is C code that holds the interpreter for as long as it runs, and
some sources make it run long (an f-string of thousands of fields costs time that grows with the
square of their number); checking a client's JSON schema against the metaschema is slow Python.
A thread does not free the event loop from the first, and neither would end on its own: both
run here in a child process forked from multiprocessing's fork server (which has imported the
readers once), killed when it passes its time or its memory, and the request gets a 422 that
says so. The server process never parses a tool's source.

As with any multiprocessing start method but fork, a child prepares by importing the parent's
main module, unless it is a package's ``__main__`` (nightshift's CLI): a script that calls this
must keep its own work under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from typing import Any, Final

from nightshift.domain.limits import DEFAULT_TOOL_READ_SECONDS
from nightshift.errors import InvalidInput
from nightshift.tools.schema import ToolSchema, client_json_schema, schema_from_args_model, schema_from_source
from nightshift.tools.signatures import SOURCE_FIELD

DEFAULT_READ_SECONDS: Final = DEFAULT_TOOL_READ_SECONDS
# The address space of a child: far more than the largest source needs.
_MEMORY_BYTES: Final = 2 * 1024 * 1024 * 1024
# Children reading at once, per event loop: more requests wait for a turn.
_AT_ONCE: Final = 4
_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRead:
    """What was read of a tool: its schema, and the client's ``json_schema`` once checked (or None)."""

    schema: ToolSchema
    client_schema: dict[str, Any] | None


def read_tool_here(
    source_code: str,
    *,
    name: str | None = None,
    args_json_schema: Mapping[str, Any] | None = None,
    json_schema: Mapping[str, Any] | None = None,
) -> ToolRead:
    """Read a tool in this process (what the child runs): see :func:`read_tool`."""
    if args_json_schema:
        schema = schema_from_args_model(source_code, args_json_schema)
    else:
        schema = schema_from_source(source_code, name=name)
    checked = client_json_schema(json_schema, schema.name) if json_schema else None
    return ToolRead(schema=schema, client_schema=checked)


async def read_tool(
    source_code: str,
    *,
    name: str | None = None,
    args_json_schema: Mapping[str, Any] | None = None,
    json_schema: Mapping[str, Any] | None = None,
    seconds: float = DEFAULT_READ_SECONDS,
) -> ToolRead:
    """A tool's schema from its source (or from ``args_json_schema``), and the client's
    ``json_schema`` checked, read in a child process that gets ``seconds`` at most. ``name``
    picks the function of the source (else its last one).

    Raises:
        InvalidInput: what is wrong with the source or the schemas, or that reading them took
            longer than ``seconds`` (or more memory than a child may have).
    """
    loop = asyncio.get_running_loop()
    turns = _turns.setdefault(loop, asyncio.Semaphore(_AT_ONCE))
    async with turns:
        outcome = await _in_child((source_code, name, dict(args_json_schema or {}), json_schema), seconds)
    kind, value = outcome
    if kind == "invalid":
        message, field = value
        raise InvalidInput(message, field=field)
    if kind != "read":
        raise RuntimeError(f"reading a tool failed in its child process: {value}")
    assert isinstance(value, ToolRead)
    return value


def _context() -> ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    # The fork server imports the readers once; each child starts from there. (Only before the
    # server starts does this count, and it is the same list every time.)
    context.set_forkserver_preload([__name__])
    return context


async def _in_child(
    arguments: tuple[str, str | None, dict[str, Any], Mapping[str, Any] | None], seconds: float
) -> tuple[str, Any]:
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(sending, arguments), daemon=True, name="nightshift-tool-read")
    try:
        # Hands the arguments to the fork server (which starts, the first time): not on the loop.
        await asyncio.to_thread(child.start)
        sending.close()
        try:
            async with asyncio.timeout(seconds):
                await _readable(receiving)
        except TimeoutError:
            raise InvalidInput(
                f"reading this tool's source took longer than {seconds:g} s (NIGHTSHIFT_TOOL_READ_SECONDS), so it "
                "was stopped: simplify the source (very long expressions or f-strings of thousands of fields are "
                "slow to parse)",
                field=SOURCE_FIELD,
            ) from None
        try:
            outcome: tuple[str, Any] = receiving.recv()
        except EOFError:
            # Not the source's doing (running out of memory is a MemoryError, answered): a bug.
            await asyncio.to_thread(child.join)
            raise RuntimeError(f"the process reading a tool ended ({child.exitcode}) before it answered") from None
        return outcome
    finally:
        receiving.close()
        sending.close()
        if child.pid is not None:
            child.kill()
            await asyncio.to_thread(child.join)
        child.close()


async def _readable(connection: Connection) -> None:
    """Wait, on the loop, until ``connection`` has something to read (or its other end closed)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    descriptor = connection.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(descriptor, wake)
    try:
        await ready
    finally:
        loop.remove_reader(descriptor)


def _child_main(
    sending: Connection, arguments: tuple[str, str | None, dict[str, Any], Mapping[str, Any] | None]
) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_BYTES, _MEMORY_BYTES))
    source_code, name, args_json_schema, json_schema = arguments
    outcome: tuple[str, Any]
    try:
        outcome = (
            "read",
            read_tool_here(source_code, name=name, args_json_schema=args_json_schema, json_schema=json_schema),
        )
    except InvalidInput as exc:
        # Sent as plain values: an exception with keyword arguments does not survive pickling.
        outcome = ("invalid", (exc.message, exc.field))
    except MemoryError:
        outcome = ("invalid", ("reading this tool's source took more memory than allowed: simplify it", SOURCE_FIELD))
    except Exception as exc:  # a bug: the parent raises it, as an internal error
        outcome = ("failed", f"{type(exc).__name__}: {exc}")
    sending.send(outcome)
    sending.close()
