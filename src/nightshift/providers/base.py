"""The provider seam: the neutral request and response types and the ``ModelProvider`` protocol.

Everything above ``providers/`` speaks these types only; each provider module maps them to and
from its wire format. A provider batch moves through::

    submit_batch -> IN_PROGRESS -> ENDED                 (results can be streamed)
                         |
                   cancel_batch -> CANCELING -> ENDED    (unprocessed requests come back canceled)

and each request of an ended batch has exactly one outcome: succeeded, errored, canceled or expired
(its result, or for a request without one, what ``BatchStatus.unanswered`` says).

A streamed call (``ChatProvider.stream``) yields ``TextDelta`` and ``ToolCallDelta`` as the model
writes, then one ``StreamEnd`` holding the whole answer, the same ``ModelResponse`` as ``complete``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, Protocol

import orjson

from nightshift.domain.agents import LLMConfig
from nightshift.domain.answers import ModelError as ModelError
from nightshift.domain.answers import ModelResponse as ModelResponse
from nightshift.domain.answers import OutcomeStatus as OutcomeStatus
from nightshift.domain.caching import NO_CACHE
from nightshift.domain.caching import CachePlan as CachePlan
from nightshift.domain.caching import CacheTtl as CacheTtl
from nightshift.domain.fast_init import fast_init
from nightshift.domain.messages import Message
from nightshift.errors import ProviderError, ProviderErrorKind

# What the wire layers send where a provider wants a turn the stored conversation lacks: a user turn
# before the first answer (Anthropic, Gemini), a result for a tool call that has none (all of them).
FIRST_USER_TURN: Final = "(The conversation so far follows.)"
MISSING_TOOL_RESULT: Final = "No result was recorded for this tool call."


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One model call, independent of the provider.

    ``messages`` are the agent's in-context messages after the system message. ``tools`` are
    ``{"name", "description", "parameters"}`` schemas as stored on our tools; with
    ``agent_arguments`` (the memgpt loops) the wire layer adds the ``inner_thoughts`` and
    ``request_heartbeat`` arguments to each and writes past reasoning back into the calls' arguments;
    without (letta_v1) the tools go as they are. With ``require_tool_call``
    the model must call a tool; ``forced_tool`` names the one it must call. With
    ``parallel_tool_calls`` it may call several in one turn. ``temperature`` is dropped for
    Anthropic, whose current API version refuses it. ``cache`` says where the prompt-cache
    breakpoints go, with which lifetime (``domain/caching.py``; providers that cache on their own
    and bill no write leave it aside). ``flex``: a normal call through the provider's tier billed
    at batch prices (OpenAI's ``flex``; only for a model of ``ProviderInfo.flex_models``).
    """

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    require_tool_call: bool = True
    forced_tool: str | None = None
    parallel_tool_calls: bool = False
    agent_arguments: bool = True
    cache: CachePlan = NO_CACHE
    flex: bool = False

    @classmethod
    def from_config(
        cls,
        config: LLMConfig,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        require_tool_call: bool = True,
        forced_tool: str | None = None,
        agent_arguments: bool = True,
    ) -> ModelRequest:
        """Build a request for an agent's LLM config (model name, max_tokens, temperature).

        Args:
            config: The agent's LLM config.
            system: The compiled system prompt.
            messages: The in-context messages after the system message, oldest first.
            tools: Tool schemas ``{"name", "description", "parameters"}``.
            require_tool_call: Whether the model must call a tool.
            forced_tool: The tool the model must call, if one is forced.
            agent_arguments: Whether the tools get ``inner_thoughts`` and ``request_heartbeat``.

        The config's ``parallel_tool_calls`` says whether the model may call several tools.

        Returns:
            The request.
        """
        return cls(
            model=config.model,
            system=system,
            messages=tuple(messages),
            # Tool schemas are shared by every agent of a step; they are never mutated, so not copied.
            tools=tuple(tools),  # type: ignore[arg-type]
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            require_tool_call=require_tool_call,
            forced_tool=forced_tool,
            parallel_tool_calls=config.parallel_tool_calls,
            agent_arguments=agent_arguments,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of the visible text the model is writing."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A piece of the ``index``-th tool call of the turn, as the model writes it.

    The first piece of a call carries its ``id`` and ``name``; ``arguments`` is the next piece of
    the arguments' JSON text as the model writes it, agent arguments (``inner_thoughts``,
    ``request_heartbeat``) included: the pieces of one call joined are its whole arguments text.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEnd:
    """The last event of a streamed call: the whole answer, as ``complete`` returns it."""

    response: ModelResponse


StreamEvent = TextDelta | ToolCallDelta | StreamEnd


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchOutcome:
    """The result of one request of a batch; ``raw`` is the provider's result line as JSON."""

    status: OutcomeStatus
    response: ModelResponse | None = None
    error: ModelError | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


class BatchState(StrEnum):
    """Where a provider batch is, in the provider-neutral machine of this module's docstring."""

    IN_PROGRESS = "in_progress"  # the provider is working on it; poll again -> canceling | ended
    CANCELING = "canceling"  # a cancel was sent; the provider is winding down -> ended
    ENDED = "ended"  # every request has an outcome and the results can be streamed (terminal)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchCounts:
    """Requests of a batch by outcome; ``processing`` are those without one yet."""

    processing: int = 0
    succeeded: int = 0
    errored: int = 0
    canceled: int = 0
    expired: int = 0

    @property
    def total(self) -> int:
        """Number of requests in the batch."""
        return self.processing + self.succeeded + self.errored + self.canceled + self.expired


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchStatus:
    """A provider batch as last seen. ``provider_status`` is the provider's own word for it.

    ``error`` is set when the provider refused the whole batch (OpenAI's ``failed`` after
    validating the input file); every request then comes back errored. ``unanswered`` is what a
    request of an ended batch for which ``batch_results`` yields nothing ended as (a provider
    that cannot list a batch's requests after it expired or was cancelled says so here).
    """

    id: str
    state: BatchState
    counts: BatchCounts
    provider_status: str
    created_at: datetime
    expires_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    unanswered: OutcomeStatus = OutcomeStatus.ERRORED


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundBatches:
    """Provider batches that may be one submitted earlier, oldest first.

    ``tagged``: found by the tag the batch carries, so every one is a copy of it (all but the first
    are duplicates to cancel); otherwise found by request count only, so only the first is taken.
    """

    ids: tuple[str, ...] = ()
    tagged: bool = False


class ChatProvider(Protocol):
    """A provider's normal API.

    Contract: ``complete`` and ``stream`` raise ``ProviderError`` (with ``kind`` and ``retryable``) when the
    provider cannot be reached or refuses the call; SDK exceptions never escape. A missing API key
    is a ``ProviderError`` naming the environment variable, raised on first use.
    """

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one request through the normal (non-batch) API and return the answer."""
        ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Run one request through the normal API's streaming: deltas as they come, then ``StreamEnd``.

        Exactly one ``StreamEnd`` ends a stream that did not raise. An error the provider sends in
        the middle of the stream is a ``ProviderError`` too, raised where it arrives.
        """
        ...


class BatchProvider(Protocol):
    """A provider's batch API.

    Contract:
      * Every method raises ``ProviderError`` as ``ChatProvider.complete`` does.
      * ``encode_request`` turns one request into its entry of the provider's batch body (JSON,
        no separator): a batch's requests are encoded as they are built, so that a batch never
        holds them all as objects. It raises ``ProviderError`` (``invalid_request``) for a
        request the provider cannot take: that request alone fails.
      * ``submit_batch`` takes ``custom_id -> entry`` (from ``encode_request``); a custom_id matches
        ``^[a-zA-Z0-9_-]{1,64}$`` (an agent id does). ``model`` is the model of every request
        (None: several, which only a provider that mixes models in a batch takes). It returns the
        provider's batch id. ``tag`` (our id of the batch) goes with it where the provider keeps
        metadata. A body over the provider's limit, or over ``max_bytes`` (a lower limit of ours),
        is refused before it is sent: with ``spool.BatchTooLarge`` (how to cut it) when it holds
        several requests, else with ``request_too_large``; one request over ``max_bytes`` alone is
        sent.
      * ``find_batches`` lists the provider's batches created at or after ``created_after`` that
        may be the one submitted with ``tag`` and ``requests`` requests (by the tag where the
        provider keeps it, else by the count; see ``FoundBatches``): after a crash between the
        provider accepting a batch and our recording it, the batch is adopted, not sent again.
      * ``batch_results`` may be called once ``retrieve_batch`` reports ``ENDED``. It yields at most
        one ``(custom_id, outcome)`` per submitted request (a request it does not name ended as
        ``BatchStatus.unanswered`` says), in no particular order, reading the
        provider's result file as a stream (memory does not grow with the batch). Close it with
        ``contextlib.aclosing`` when you may stop early.
      * Per-request errors inside a batch are outcomes, not exceptions.
    """

    def encode_request(self, custom_id: str, request: ModelRequest) -> bytes:
        """The request as its entry of a batch body."""
        ...

    async def submit_batch(
        self, requests: Mapping[str, bytes], *, model: str | None, tag: str, max_bytes: int | None = None
    ) -> str:
        """Submit one batch of ``custom_id -> entry`` and return the provider's batch id."""
        ...

    async def find_batches(self, tag: str, *, created_after: datetime, requests: int) -> FoundBatches:
        """The batches that may be the one submitted with ``tag``."""
        ...

    async def retrieve_batch(self, batch_id: str) -> BatchStatus:
        """The batch's current state and counts."""
        ...

    def batch_results(self, batch_id: str) -> AsyncGenerator[tuple[str, BatchOutcome], None]:
        """Stream the outcome of every request of an ended batch as ``(custom_id, outcome)``."""
        ...

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        """Ask the provider to cancel the batch; returns its state (usually ``CANCELING``)."""
        ...


class ModelProvider(ChatProvider, BatchProvider, Protocol):
    """One model provider, for single calls and for batches."""


def parse_json_line(line: str | bytes) -> Any:
    """One line of a provider's JSONL (a batch's results, output or error file).

    orjson reads it faster than the standard library, which counts at ten thousand lines a
    batch; what orjson refuses (a lone surrogate, which a model may write, is
    valid JSON) is read by the standard library, which raises as before on a line that is not JSON.
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def one_model(requests: Mapping[str, bytes], model: str | None, *, provider: str) -> str:
    """The model of a batch's requests, for a provider whose batch takes one model.

    Raises:
        ProviderError: there is no request, or requests for several models (``model`` None).
    """
    if not requests:
        raise ProviderError("a batch needs at least one request", kind=ProviderErrorKind.INVALID_REQUEST)
    if model is None:
        raise ProviderError(
            f"{provider}'s batches take requests for one model only: submit one batch per model",
            kind=ProviderErrorKind.INVALID_REQUEST,
        )
    return model
