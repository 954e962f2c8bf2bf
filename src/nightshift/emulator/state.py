"""The emulator's memory: config, scripts, faults, logs, prompt cache, batches and files.

One ``EmulatorState`` per app, owned by its event loop (handlers are async and never wait while
changing it, so no lock is needed). ``answer`` is where a request meets the knobs: a scripted reply
for its custom_id first, then an injected error (batches only), then the scripted model.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nightshift.emulator.batches import BatchJob, RequestResult, Timing
from nightshift.emulator.config import EmulatorConfig, HttpFault, ScriptedError, ScriptedReply, ScriptedToolCall
from nightshift.emulator.model import ModelCall, ModelInput, ModelOutput, respond
from nightshift.emulator.tokens import PromptCache

DAY_SECONDS = 24 * 3600
NORMAL_SCRIPT_KEY = "*"


@dataclass(slots=True, kw_only=True)
class StoredFile:
    """A file: an upload, or a batch's output / error / results file (one chunk per line).

    ``public`` is OpenAI's file object; Gemini's is ``gemini_api.file_json``.
    """

    id: str
    filename: str
    purpose: str
    created_at: int
    chunks: list[bytes] = field(default_factory=list)
    mime_type: str = "application/octet-stream"  # Gemini's files say theirs

    @property
    def size(self) -> int:
        """Size in bytes."""
        return sum(len(c) for c in self.chunks)

    def public(self) -> dict[str, Any]:
        """The file object as the API shows it."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass(slots=True)
class _Fault:
    spec: HttpFault
    remaining: int


class EmulatorState:
    """Everything the emulator remembers between requests."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.initial = config
        self.config = config
        self.scripts: dict[str, deque[ScriptedReply]] = {}
        self.faults: list[_Fault] = []
        self.requests: deque[dict[str, Any]] = deque()
        self.model_calls: deque[dict[str, Any]] = deque()
        self.anthropic_batches: dict[str, BatchJob] = {}
        self.openai_batches: dict[str, BatchJob] = {}
        self.files: dict[str, StoredFile] = {}
        self.gemini_batches: dict[str, BatchJob] = {}
        self.gemini_files: dict[str, StoredFile] = {}  # by name, ``files/...``
        self.gemini_uploads: dict[str, StoredFile] = {}  # resumable uploads under way, by upload id
        self._counters: dict[str, int] = {}
        # Ids count up from the emulator's start in microseconds: one started later never gives an
        # id an earlier one gave (none gives a million ids a second), and ids still sort in
        # creation order across emulators.
        self._first_id = time.time_ns() // 1000
        self.cache = PromptCache()
        self._ahead = 0.0
        self.reset()

    def now(self) -> float:
        """The emulator's time (Unix seconds): the machine's, plus what ``advance`` let pass."""
        return time.time() + self._ahead

    def advance(self, seconds: float) -> float:
        """Let ``seconds`` pass at once for the batches and the prompt cache; returns the new time
        (a reset, which forgets every batch and cache entry, brings it back to the machine's)."""
        self._ahead += seconds
        return self.now()

    def reset(self) -> None:
        """Back to the config the app was created with and to the machine's time; forget batches,
        files, logs and the cache.

        Ids go on counting: a provider never gives an id twice, and a database that outlives the
        reset (or the emulator: ``make bench`` on one PostgreSQL database) would otherwise see a
        batch id again.
        """
        self._ahead = 0.0
        self.anthropic_batches.clear()
        self.openai_batches.clear()
        self.files.clear()
        self.gemini_batches.clear()
        self.gemini_files.clear()
        self.gemini_uploads.clear()
        self.requests.clear()
        self.model_calls.clear()
        self.cache.clear()
        self.scripts.clear()
        self.faults.clear()
        self.config = self.initial
        self._apply(self.initial, scripts=True, faults=True)

    def configure(self, update: Mapping[str, Any]) -> EmulatorConfig:
        """Replace the fields given; ``scripts`` and ``faults`` given replace the pending ones."""
        merged = EmulatorConfig.model_validate({**self.config.model_dump(), **update})
        self.config = merged
        self._apply(merged, scripts="scripts" in update, faults="faults" in update)
        return merged

    def _apply(self, config: EmulatorConfig, *, scripts: bool, faults: bool) -> None:
        if scripts:
            self.scripts = {key: deque(replies) for key, replies in config.scripts.items()}
        if faults:
            self.faults = [_Fault(spec=f, remaining=f.count) for f in config.faults]
        self.requests = deque(self.requests, maxlen=config.log_limit)
        self.model_calls = deque(self.model_calls, maxlen=config.log_limit)

    def add_script(self, key: str, replies: list[ScriptedReply]) -> None:
        """Queue replies for a custom_id (``*``: normal API calls), used in order."""
        self.scripts.setdefault(key, deque()).extend(replies)

    def add_faults(self, faults: list[HttpFault]) -> None:
        """Queue HTTP faults."""
        self.faults.extend(_Fault(spec=f, remaining=f.count) for f in faults)

    def take_fault(self, method: str, path: str) -> HttpFault | None:
        """The fault the next request to ``path`` must get, if any (it counts one down)."""
        for fault in self.faults:
            spec = fault.spec
            if spec.method is not None and spec.method.upper() != method.upper():
                continue
            matches = path.startswith(spec.path[:-1]) if spec.path.endswith("*") else path == spec.path
            if matches and fault.remaining > 0:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self.faults.remove(fault)
                return spec
        return None

    def next_id(self, prefix: str) -> str:
        """A new id with this prefix, counting up (ids sort in creation order)."""
        count = self._counters.get(prefix, self._first_id) + 1
        self._counters[prefix] = count
        return f"{prefix}{count:024x}"

    def new_batch(
        self, batch_id: str, now: float, requests: Sequence[tuple[str, RequestResult]], **fields: Any
    ) -> BatchJob:
        """A batch created now of these (custom_id, result) pairs, with the config's timing knobs;
        ``held_back_fraction`` of its requests (picked by a hash of the custom_id) go last in its
        processing order, held back. ``fields``: the rest of ``BatchJob``."""
        c = self.config
        held = [_share(f"held back {custom_id}") < c.held_back_fraction for custom_id, _ in requests]
        ordered = [pair for pair, late in zip(requests, held, strict=True) if not late]
        ordered += [pair for pair, late in zip(requests, held, strict=True) if late]
        lifetime = c.expire_after_seconds if c.expire_after_seconds is not None else DAY_SECONDS
        timing = Timing(
            polls_to_end=c.polls_to_end,
            seconds_to_end=c.seconds_to_end,
            finalizing_polls=c.finalizing_polls,
            cancel_polls=c.cancel_polls,
            expire_after_polls=c.expire_after_polls,
            expires_at=now + lifetime,
            held_back=sum(held),
            held_back_seconds=c.held_back_seconds,
        )
        return BatchJob(
            id=batch_id,
            created_at=now,
            timing=timing,
            custom_ids=[custom_id for custom_id, _ in ordered],
            results=[result for _, result in ordered],
            **fields,
        )

    def log_request(
        self, method: str, path: str, body: Any, headers: Mapping[str, str], *, at: float | None = None
    ) -> None:
        """Remember a request the API received (``at``: when its body had arrived; now by default)."""
        kept = {k: v for k, v in headers.items() if k.startswith(("anthropic-", "openai-", "x-stainless-retry"))}
        received = self.now() if at is None else at
        self.requests.append({"method": method, "path": path, "headers": kept, "body": body, "received_at": received})

    def answer(
        self,
        model_input: ModelInput,
        *,
        api: str,
        body: Mapping[str, Any],
        custom_id: str | None = None,
        batch_id: str | None = None,
    ) -> ModelOutput | ScriptedError:
        """The answer to one request: scripted, injected error, or the scripted model's.

        Args:
            model_input: What the model reads.
            api: ``anthropic``, ``openai`` or ``gemini`` (for the log).
            body: The request as received (for the log).
            custom_id: The batch request's custom_id; None for a normal call.
            batch_id: The batch it belongs to, if any.

        Returns:
            The model's output, or the error to answer with.
        """
        self.model_calls.append({"api": api, "custom_id": custom_id, "batch_id": batch_id, "body": body})
        queue = self.scripts.get(custom_id if custom_id is not None else NORMAL_SCRIPT_KEY)
        if queue:
            return _scripted(queue.popleft(), model_input)
        if custom_id is not None:
            kind = self.config.errors.get(custom_id)
            if kind is not None:
                return ScriptedError(type=kind)
            if self.config.error_fraction > 0 and _share(custom_id) < self.config.error_fraction:
                return ScriptedError(type=self.config.error_type)
        return respond(model_input)


def _share(custom_id: str) -> float:
    """A stable number in [0, 1) for a custom_id: which requests an error fraction hits."""
    return int(hashlib.sha256(custom_id.encode()).hexdigest()[:8], 16) / 2**32


def _scripted(reply: ScriptedReply, model_input: ModelInput) -> ModelOutput | ScriptedError:
    if reply.error is not None:
        return reply.error
    calls = [*([reply.tool_call] if reply.tool_call is not None else []), *reply.tool_calls]
    if not calls:
        return ModelOutput(text=reply.text or "")
    return ModelOutput(calls=tuple(_scripted_call(call, model_input) for call in calls), text=reply.text)


def _scripted_call(call: ScriptedToolCall, model_input: ModelInput) -> ModelCall:
    tool = next((t for t in model_input.tools if t.name == call.name), None)
    properties = tool.parameters.get("properties") or {} if tool is not None else {}
    arguments = dict(call.arguments)
    if "inner_thoughts" in properties and "inner_thoughts" not in arguments:
        arguments = {"inner_thoughts": call.inner_thoughts or f"Calling {call.name}.", **arguments}
    if "request_heartbeat" in properties and "request_heartbeat" not in arguments:
        arguments["request_heartbeat"] = bool(call.request_heartbeat)
    return ModelCall(tool_name=call.name, arguments=arguments)
