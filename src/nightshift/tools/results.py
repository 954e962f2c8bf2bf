"""One sandboxed tool call, and what it produced, as the sandbox returns it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxCall:
    """One call of a tool function defined in ``source_code``, with JSON-serializable arguments.

    ``env`` is added to the call's environment: the agent's secrets, seen by this call only.
    """

    organization_id: str
    source_code: str
    function_name: str
    arguments: dict[str, Any]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxResult:
    """What a call produced.

    Attributes:
        ok: True when the function returned; False when it raised, timed out, went over a limit,
            or could not run.
        value: The JSON-decoded return value when ``ok`` (values JSON cannot hold come back as their
            ``str()``); None otherwise.
        error: ``"TypeError: ..."`` for an exception in the tool, ``"timed out after 2.0 s"`` and
            the like when not ``ok``; None when ``ok``.
        stdout: What the tool printed.
        stderr: What the tool wrote to ``sys.stderr``.
        duration_ms: Time from sending the call to a zygote to its answer (queueing excluded).
    """

    ok: bool
    value: Any
    error: str | None
    stdout: str
    stderr: str
    duration_ms: float


def failure(error: str, *, started: float, stdout: str = "", stderr: str = "") -> SandboxResult:
    """A result for a call that did not return: ``error`` says why; the time since ``started``."""
    return SandboxResult(
        ok=False,
        value=None,
        error=error,
        stdout=stdout,
        stderr=stderr,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
