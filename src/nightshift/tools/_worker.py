"""The sandbox worker process: runs custom tool functions on request, one at a time.

Started by :class:`nightshift.tools.sandbox.ProcessSandbox` as a script (``python -I _worker.py``),
so it imports nothing from nightshift and sees no server environment. It owns the worker side of
the protocol: newline-delimited JSON on the ORIGINAL stdin/stdout file descriptors, which are moved
aside at startup so tool code can neither read requests nor write into the response stream.

Messages:
    worker -> pool, once at startup:  ``{"ready": true}``
    pool -> worker, per call:         ``{"id", "call": {"source_code", "function_name", "arguments"}}``
    worker -> pool, per call:         ``{"id", "ok", "value", "error", "stdout", "stderr"}``

The worker exits when its request stream reaches end of file.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import faulthandler
import hashlib
import inspect
import io
import json
import os
import resource
import sys
from collections import OrderedDict
from types import CodeType
from typing import Any, BinaryIO

_CODE_CACHE_SIZE = 128
# Captured tool output is cut to this many characters per stream so one chatty tool cannot make a
# response line too long for the pool to read.
_OUTPUT_LIMIT = 1_000_000
_TOOL_MODULE_NAME = "nightshift_tool"

_code_cache: OrderedDict[str, CodeType] = OrderedDict()


def main(argv: list[str] | None = None) -> int:
    """Serve requests until the pool closes the request stream.

    Args:
        argv: Command-line arguments; ``--memory-limit-mb N`` caps the address space (0: no cap).

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(prog="nightshift-tool-worker")
    parser.add_argument("--memory-limit-mb", type=int, default=0)
    options = parser.parse_args(argv)
    if options.memory_limit_mb > 0:
        limit = options.memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # A segfault in a C extension then leaves a traceback on stderr, which the pool reports.
    faulthandler.enable()

    requests, responses = _take_protocol_streams()
    home = os.getcwd()
    _write(responses, {"ready": True})
    while line := requests.readline():
        response = _handle(line)
        _write(responses, response)
        with contextlib.suppress(OSError):
            os.chdir(home)  # a tool that changed directory must not move the next one
    return 0


def _take_protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """Move the protocol to private descriptors; point fds 0 and 1 where tool code cannot hurt it."""
    requests = os.fdopen(os.dup(0), "rb")
    responses = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # Output written straight to fd 1 (C code, child processes) lands with stderr, which the pool
    # drains, instead of in the middle of a response line.
    os.dup2(2, 1)
    return requests, responses


def _write(responses: BinaryIO, message: dict[str, Any]) -> None:
    responses.write(_encode(message) + b"\n")
    responses.flush()


def _encode(message: dict[str, Any]) -> bytes:
    """One response line; values JSON cannot hold are sent as their ``str()``."""
    try:
        return json.dumps(message, default=str).encode("utf-8")
    except Exception:  # a value that contains itself, or whose __str__ raises
        pass
    try:
        fallback = {**message, "value": str(message.get("value"))}
    except Exception as exc:
        fallback = _failure(message.get("id"), f"return value cannot be sent: {_describe(exc)}", "", "")
    return json.dumps(fallback, default=str).encode("utf-8")


def _handle(line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line)
        request_id = request["id"]
        call = request["call"]
        source_code: str = call["source_code"]
        function_name: str = call["function_name"]
        arguments: dict[str, Any] = call["arguments"]
    except (ValueError, KeyError, TypeError) as exc:
        return _failure(None, f"bad request: {exc}", "", "")

    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            value = _call(source_code, function_name, arguments)
    except BaseException as exc:  # sys.exit() in a tool is the tool's failure, not the worker's end
        return _failure(request_id, _describe(exc), stdout.getvalue(), stderr.getvalue())
    return {
        "id": request_id,
        "ok": True,
        "value": value,
        "error": None,
        "stdout": _cut(stdout.getvalue()),
        "stderr": _cut(stderr.getvalue()),
    }


def _call(source_code: str, function_name: str, arguments: dict[str, Any]) -> Any:
    namespace: dict[str, Any] = {"__name__": _TOOL_MODULE_NAME, "__builtins__": builtins}
    exec(_compile(source_code), namespace)
    function = namespace.get(function_name)
    if not callable(function):
        raise NameError(f"source_code defines no function {function_name!r}")
    value = function(**arguments)
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited on purpose; closing avoids a "never awaited" warning
        raise TypeError(f"{function_name!r} is async: tools must be plain 'def' functions")
    return value


def _compile(source_code: str) -> CodeType:
    key = hashlib.sha256(source_code.encode("utf-8", "surrogatepass")).hexdigest()
    code = _code_cache.get(key)
    if code is None:
        code = compile(source_code, "<tool>", "exec")
        _code_cache[key] = code
        if len(_code_cache) > _CODE_CACHE_SIZE:
            _code_cache.popitem(last=False)
    else:
        _code_cache.move_to_end(key)
    return code


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _failure(request_id: Any, error: str, stdout: str, stderr: str) -> dict[str, Any]:
    return {
        "id": request_id,
        "ok": False,
        "value": None,
        "error": error,
        "stdout": _cut(stdout),
        "stderr": _cut(stderr),
    }


def _cut(text: str) -> str:
    if len(text) <= _OUTPUT_LIMIT:
        return text
    return text[:_OUTPUT_LIMIT] + f"\n[... {len(text) - _OUTPUT_LIMIT} more characters cut]"


if __name__ == "__main__":
    sys.exit(main())
