"""The client's types: what the server answers, as pydantic models, and a run's request.

Every answer model keeps the fields it does not know (``extra="allow"``) rather than refusing
them, so a client older than its server keeps working; ``tests/integration/test_client_drift.py``
checks that each model names exactly the fields, with the types, of the server's OpenAPI schema.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class TokenUsage(_Answer):
    """Tokens used, by kind (zero for a kind the server left out: nothing answered yet)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Every token read and written (``cache_write_tokens`` already counts the 5m and 1h writes)."""
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


class AgentCounts(_Answer):
    """A run's agents by where they are."""

    running: int
    finished: int
    failed: int
    cancelled: int
    awaiting_approval: int = 0


class RunFailure(_Answer):
    """An agent that failed in a run: the step it failed at and why."""

    agent_id: str
    agent_name: str | None
    agent_deleted: bool
    step_number: int
    request_status: str
    error: str | None


class ProviderBatch(_Answer):
    """One batch of one step at one provider."""

    id: str
    provider: str
    provider_batch_id: str | None
    step_number: int
    status: str
    provider_status: str | None
    request_counts: dict[str, int]
    usage: TokenUsage
    cost_usd: float
    takeover_at: datetime | None = Field(
        default=None, description="When its unanswered requests were taken over for the run's deadline"
    )
    taken_over: int = Field(default=0, description="Its requests answered through the normal API instead")
    takeover_usd: float = Field(default=0.0, description="What those cost above the batch price (in cost_usd)")
    error: str | None
    duplicates: list[str]
    created_at: datetime
    ended_at: datetime | None
    updated_at: datetime


class ProviderProblem(_Answer):
    """A run's newest problem with a provider, known from its first failed attempt."""

    provider: str
    provider_batch_id: str
    step_number: int
    stage: str | None = Field(description="submit, poll, apply or cancel: what is retried; None once closed")
    error: str
    attempts: int
    retrying: bool
    retry_at: datetime | None


class BatchRunProgress(_Answer):
    """Where a run is: its step (from 0), its agents, tokens, costs, failures and provider batches."""

    step: int
    agents: AgentCounts
    summaries: int
    failures: list[RunFailure]
    usage: TokenUsage
    cost_usd: float
    cost_without_batch_usd: float
    batch_savings_usd: float
    cache_savings_usd: float
    takeover_usd: float = Field(
        default=0.0, description="What the requests taken over for the deadline cost above the batch price"
    )
    last_error: ProviderProblem | None = None
    provider_batches: list[ProviderBatch]


class KindCosts(_Answer):
    """What the organization's batch runs of one kind (main or sleeptime) did and cost, all told."""

    kind: str
    runs: int
    agents: int
    requests: int = Field(description="Requests the providers answered")
    usage: TokenUsage
    cost_usd: float
    cost_without_batch_usd: float = Field(description="What the same tokens cost through the normal API")
    batch_savings_usd: float
    cache_savings_usd: float


class BatchRunCosts(_Answer):
    """The organization's batch costs by kind of run, main first."""

    kinds: list[KindCosts]

    def of(self, kind: str) -> KindCosts | None:
        """The figures of one kind (``main``, ``sleeptime``), None when the server has no such kind."""
        return next((k for k in self.kinds if k.kind == kind), None)


class ProviderTurnaround(_Answer):
    """How long a provider's latest batches took, from submit to the poll that saw the end."""

    provider: str
    ended: int = Field(description="How many of the latest provider batches (1,000 at most) ended")
    p10_seconds: float | None = Field(description="The 10th percentile (None under 5 ends)")
    p50_seconds: float | None
    p90_seconds: float | None


class ModelTurnaround(ProviderTurnaround):
    """The same of the batches whose requests were all of one model."""

    model: str


class BatchTurnarounds(_Answer):
    """The organization's provider batches' turnarounds, by provider and by model."""

    providers: list[ProviderTurnaround]
    models: list[ModelTurnaround] = Field(default_factory=list)


# A run's statuses once it has ended (``created`` and ``running`` are the others).
FINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "expired"})


class BatchRun(_Answer):
    """A batch run (Letta's BatchJob) with its progress."""

    id: str
    status: str
    job_type: str = "batch"
    kind: str = "main"  # "sleeptime": a run of sleep-time agents the server gathered
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    metadata: dict[str, Any]
    callback_url: str | None
    callback_sent_at: datetime | None
    callback_status_code: int | None
    callback_error: str | None
    agent_id: None = None
    deadline: datetime | None = Field(default=None, description="When the run is to be done by")
    error: str | None = Field(default=None, description="Why the run failed before its first step")
    progress: BatchRunProgress

    @property
    def name(self) -> str | None:
        """The name given at creation (kept in ``metadata["name"]``)."""
        name = self.metadata.get("name")
        return name if isinstance(name, str) else None

    @property
    def is_final(self) -> bool:
        """Whether the run has ended (completed, failed, cancelled or expired)."""
        return self.status in FINAL_STATUSES


class BatchRunAgentRequest(_Answer):
    """One request of an agent in a run: its step, its tokens and what it cost, and what its
    caching saved (negative where a cache write cost more than it saved)."""

    step_number: int
    summary: bool = Field(description="It summarized the agent's window rather than stepping it")
    status: str = Field(description="created, running, completed, failed, cancelled or expired")
    usage: TokenUsage | None
    cost_usd: float
    cost_without_batch_usd: float
    batch_savings_usd: float
    cache_savings_usd: float
    taken_over: bool = Field(default=False, description="Sent through the normal API for the run's deadline")


class BatchRunAgent(_Answer):
    """One agent of a run: its state, steps answered, tokens, costs and last error, and each request's."""

    agent_id: str
    agent_name: str
    agent_deleted: bool
    state: str = Field(description="running, finished, failed, cancelled or needs_approval")
    steps: int
    step_number: int
    usage: TokenUsage
    cost_usd: float
    cost_without_batch_usd: float
    batch_savings_usd: float
    cache_savings_usd: float
    error: str | None
    requests: list[BatchRunAgentRequest] = Field(default_factory=list)


class MessagePart(_Answer):
    """A part of a message's content: ``text`` or ``reasoning``."""

    type: str
    text: str | None = None
    reasoning: str | None = None
    is_native: bool | None = None


class ToolCallFunction(_Answer):
    name: str
    arguments: str


class ToolCall(_Answer):
    id: str
    type: str = "function"
    function: ToolCallFunction


class RunMessage(_Answer):
    """A message of a batch run (OpenAI-like): an input, a reply, a tool call or its result."""

    id: str
    agent_id: str
    role: str
    content: list[MessagePart]
    name: str | None
    tool_calls: list[ToolCall]
    tool_call_id: str | None
    created_at: datetime
    batch_item_id: str | None

    @property
    def text(self) -> str:
        """The text parts, joined by lines."""
        return "\n".join(p.text for p in self.content if p.type == "text" and p.text)


class AgentRun(_Answer):
    """Letta's ``Run`` (``/v1/runs``): a send to one agent (``run-...``) or a batch run (``batch-...``)."""

    id: str
    agent_id: str | None
    status: str
    background: bool
    created_at: datetime
    completed_at: datetime | None
    stop_reason: str | None
    metadata: dict[str, Any]
    request_config: dict[str, Any] | None
    callback_url: str | None
    callback_sent_at: datetime | None
    callback_status_code: int | None
    callback_error: str | None
    total_duration_ns: int | None
    ttft_ns: int | None
    conversation_id: str | None
    base_template_id: str | None


class PromptTokensDetails(_Answer):
    cached_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int


class CompletionTokensDetails(_Answer):
    reasoning_tokens: int


class RunStep(_Answer):
    """Letta's ``Step``: one model call of an agent run, with its tokens."""

    id: str
    run_id: str
    agent_id: str
    status: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    created_at: datetime


class RunUsage(_Answer):
    """The tokens of a run; ``prompt_tokens`` counts the cached ones too."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails


class ApiKey(_Answer):
    """An API key, without its secret."""

    id: str
    organization_id: str
    name: str
    prefix: str | None
    is_admin: bool
    status: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class ApiKeyCreated(ApiKey):
    """A key just made, with its secret (``key``): shown this once, never again."""

    key: str


class BatchRequest(BaseModel):
    """One agent's request in a batch run: its messages (or the ``input`` shorthand).

    ``messages`` are in Letta's shape (``{"role": "user", "content": "..."}``, or an approval's
    answer); the server checks them. ``client_tools`` are the client-side tools offered for the run.
    """

    model_config = ConfigDict(extra="forbid")

    agent_id: str = Field(min_length=1)
    messages: list[dict[str, Any]] | None = None
    input: str | list[dict[str, Any]] | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    client_tools: list[dict[str, Any]] | None = None


class AgentResult(BaseModel):
    """What one agent of a run came to: its replies, state, tokens and cost (``batches.results``)."""

    agent_id: str
    agent_name: str
    state: str = Field(description="finished, failed, cancelled, needs_approval, or running if the run goes on")
    steps: int
    replies: list[str] = Field(description="The agent's replies in the run, in order (send_message's or its text)")
    usage: TokenUsage
    cost_usd: float
    error: str | None
    messages: list[RunMessage] = Field(description="Every message the run wrote for the agent, oldest first")

    @property
    def final_message(self) -> str | None:
        """The agent's last reply, or None when it gave none."""
        return self.replies[-1] if self.replies else None
