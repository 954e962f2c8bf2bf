"""The emulator's knobs: batch latency, expiry, slow cancels, injected errors, scripted answers, faults.

One ``EmulatorConfig`` is given to ``create_app`` and can be changed while the server runs through
``POST /_emulator/config`` (fields given replace the current ones). Timing knobs are copied into a
batch when it is created, so changing them later does not move batches already running.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScriptedToolCall(_Frozen):
    """A tool call to answer with. Missing ``inner_thoughts`` / ``request_heartbeat`` are filled in
    when the tool's schema has them (thoughts from the tool name, heartbeat false)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    inner_thoughts: str | None = None
    request_heartbeat: bool | None = None


class ScriptedError(_Frozen):
    """An error to answer with, by Anthropic error type (in OpenAI's or Google's shape for theirs)."""

    type: str = "overloaded_error"
    message: str | None = None


class ScriptedReply(_Frozen):
    """One exact answer for one request: tool calls and/or a text, or an error.

    ``tool_call`` and then ``tool_calls`` are the turn's calls, in that order (several calls make
    one turn whatever the request allows: a script says exactly what the model answers).
    """

    tool_call: ScriptedToolCall | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    text: str | None = None
    error: ScriptedError | None = None


class HttpFault(_Frozen):
    """Fail the next ``count`` HTTP requests whose path matches, before they reach the API.

    ``path`` is an exact path or a prefix ending in ``*`` (``/v1/messages/batches*``). The body is
    the provider's error body; ``should_retry`` sets ``x-should-retry``, ``retry_after`` (seconds)
    ``retry-after`` and ``retry_after_ms`` ``retry-after-ms``.
    """

    path: str
    method: str | None = None
    status: int = 429
    count: int = 1
    should_retry: bool | None = None
    retry_after: float | None = None
    retry_after_ms: int | None = None
    message: str | None = None


class EmulatorConfig(_Frozen):
    """Everything a test or a demo can tune.

    Batch latency: a batch ends at the first retrieve after both ``polls_to_end`` retrieves (polls)
    saw it in progress and ``seconds_to_end`` passed since it was created; requests are processed
    in order, in proportion to that progress (so a cancel or an expiry part-way leaves the first
    requests done and the rest canceled / expired). The defaults end a batch at its first retrieve.
    """

    polls_to_end: int = Field(default=0, ge=0)
    seconds_to_end: float = Field(default=0.0, ge=0)
    finalizing_polls: int = Field(default=0, ge=0)  # OpenAI: retrieves that see "finalizing"
    cancel_polls: int = Field(default=0, ge=0)  # retrieves that still see canceling / cancelling
    expire_after_polls: int | None = Field(default=None, ge=0)  # a batch expires after N polls...
    expire_after_seconds: float | None = Field(default=None, ge=0)  # ...or N seconds (default 24 h)
    # A share of each batch's requests (picked by a hash of the custom_id) processed last, not before
    # ``held_back_seconds`` after the create: the stragglers that keep a batch open.
    held_back_fraction: float = Field(default=0.0, ge=0, le=1)
    held_back_seconds: float = Field(default=3_600.0, ge=0)
    # A batch create answers this long after the batch exists: a window in which a client that
    # dies has had its batch accepted without hearing so (what durability tests kill into).
    create_answer_delay: float = Field(default=0.0, ge=0)

    errors: dict[str, str] = Field(default_factory=dict)  # custom_id -> error type, in batches
    error_fraction: float = Field(default=0.0, ge=0, le=1)  # share of batch requests that fail...
    error_type: str = "overloaded_error"  # ...with this error (chosen by a hash of the custom_id)
    scripts: dict[str, list[ScriptedReply]] = Field(default_factory=dict)  # custom_id ("*": normal calls)
    faults: list[HttpFault] = Field(default_factory=list)

    openai_unrun_lines: bool = True  # OpenAI: error-file lines (batch_expired...) for requests never run
    # Gemini: the largest inline batch body (the API's limit is about 20 MB; over it, a 400), and
    # whether requests an expired or cancelled batch never ran come back as errors (RPC code 4
    # DEADLINE_EXCEEDED / 1 CANCELLED) or are left out of its results.
    gemini_inline_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    gemini_unrun_entries: bool = True

    api_key: str | None = None  # when set, only this key is accepted
    # Context windows in tokens, by model name; other models get the default. A request whose
    # prompt and max_tokens do not fit is refused as too long.
    context_windows: dict[str, int] = Field(default_factory=dict)
    default_context_window: int = Field(default=200_000, ge=1)
    cache_min_tokens: int = Field(default=0, ge=0)  # shortest prefix the prompt cache keeps
    log_limit: int = Field(default=20_000, ge=0)  # entries kept in each log

    def context_window(self, model: str) -> int:
        """The context window of ``model``, in tokens."""
        return self.context_windows.get(model, self.default_context_window)
