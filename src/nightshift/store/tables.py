"""The schema, as SQLAlchemy Core tables. Rows never leave ``store/``: repositories map them.

Core (not the ORM) because the hot paths insert and update thousands of rows per statement.
Alembic's migrations in ``store/migrations`` must produce exactly this schema (a test checks it).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

from nightshift.store.clean import CleanString, CleanText
from nightshift.store.column_types import JSONType, NullableJSONType

# Named by the migrations as ``nightshift.store.tables.UTCDateTime``, where it was first defined.
from nightshift.store.column_types import UTCDateTime as UTCDateTime

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)


def _id(prefix_comment: str) -> Column[Any]:
    return Column("id", String(64), primary_key=True, comment=prefix_comment)


def _org() -> Column[Any]:
    return Column("organization_id", String(64), ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False)


def _times() -> list[Column[Any]]:
    return [
        Column("created_at", UTCDateTime(), nullable=False),
        Column("updated_at", UTCDateTime(), nullable=False),
    ]


organizations = Table(
    "organizations",
    metadata,
    _id("org-..."),
    Column("name", String(255), nullable=False, unique=True),
    Column("created_at", UTCDateTime(), nullable=False),
)

users = Table(
    "users",
    metadata,
    _id("user-..."),
    _org(),
    Column("name", String(255), nullable=False),
    Column("api_key_hash", String(128), nullable=False, unique=True, comment="sha256 of the key"),
    Column("key_prefix", String(16), comment="the key's first characters, shown to tell keys apart; null for old keys"),
    Column("is_admin", Boolean, nullable=False, server_default=false(), comment="may manage its organization's keys"),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("last_used_at", UTCDateTime(), comment="written at most once a minute per key and process"),
    Column("revoked_at", UTCDateTime(), comment="set once: from then on the key is refused"),
)

agents = Table(
    "agents",
    metadata,
    _id("agent-..."),
    _org(),
    Column("name", String(255), nullable=False),
    Column("description", CleanText),
    Column("system", CleanText, nullable=False),
    Column("llm_config", JSONType, nullable=False),
    Column("embedding", String(255)),
    Column("tool_rules", JSONType, nullable=False),
    Column("metadata", JSONType, nullable=False),
    Column("message_ids", JSONType, nullable=False, comment="the in-context window, in order"),
    Column("message_buffer_autoclear", Boolean, nullable=False),
    Column(
        "secrets",
        JSONType,
        nullable=False,
        server_default=text("'{}'"),
        comment="environment variables of the agent's tool calls; never returned by the API",
    ),
    Column("stepping_until", UTCDateTime(), comment="a synchronous step holds the agent until then"),
    Column("stepping_run_id", String(64), comment="the agent run whose synchronous step holds the agent"),
    Column(
        "context_tokens",
        Integer,
        comment="the size of the request its window makes, in tokens; null until counted",
    ),
    Column(
        "agent_type",
        String(64),
        nullable=False,
        server_default=text("'memgpt_v2_agent'"),
        comment="the loop it runs (Letta's agent_type); agents made before it was kept ran the memgpt loop",
    ),
    *_times(),
    Column(
        "managed_group_id",
        String(64),
        comment="the group it manages (its sleep-time agent's); no foreign key: deleting a group clears it",
    ),
    Index("ix_agents_org_name", "organization_id", "name"),
    # A page of agents is ordered by id, and agents are loaded by id within their organization: on
    # (organization_id, name) alone, SQLite read every agent of the organization for either.
    Index("ix_agents_org_id", "organization_id", "id"),
    Index(
        "ix_agents_managed_group_id",
        "managed_group_id",
        sqlite_where=text("managed_group_id IS NOT NULL"),
        postgresql_where=text("managed_group_id IS NOT NULL"),
    ),
)

agent_tags = Table(
    "agent_tags",
    metadata,
    Column("agent_id", String(64), ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True),
    Column("tag", String(255), primary_key=True),
    Index("ix_agent_tags_tag", "tag"),
)

blocks = Table(
    "blocks",
    metadata,
    _id("block-..."),
    _org(),
    Column("label", String(255), nullable=False),
    Column("value", CleanText, nullable=False),
    Column("limit", Integer, nullable=False),
    Column("description", CleanText),
    Column("read_only", Boolean, nullable=False),
    Column("metadata", JSONType, nullable=False),
    *_times(),
    Column(
        "standalone",
        Boolean,
        nullable=False,
        server_default=false(),
        comment="made on its own (POST /v1/blocks), not with an agent: deleting an agent never deletes it",
    ),
)

agent_blocks = Table(
    "agent_blocks",
    metadata,
    Column("agent_id", String(64), ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True),
    Column("block_id", String(64), ForeignKey("blocks.id", ondelete="CASCADE"), primary_key=True),
    Column("label", String(255), nullable=False),
    Column("position", Integer, nullable=False),
    UniqueConstraint("agent_id", "label", name="uq_agent_blocks_agent_label"),
    Index("ix_agent_blocks_block_id", "block_id"),
)

tools = Table(
    "tools",
    metadata,
    _id("tool-..."),
    _org(),
    Column("name", String(255), nullable=False),
    Column("description", CleanText, nullable=False),
    Column("tool_type", String(32), nullable=False),
    Column("source_code", CleanText),
    Column("json_schema", JSONType, nullable=False),
    # The client's pydantic argument model as a JSON schema, when the tool takes model-typed arguments.
    Column("args_json_schema", JSONType),
    Column("tags", JSONType, nullable=False),
    Column("return_char_limit", Integer, nullable=False),
    Column("metadata", JSONType, nullable=False),
    Column(
        "default_requires_approval",
        Boolean,
        nullable=False,
        server_default=false(),
        comment="an agent given the tool gets a requires_approval rule for it",
    ),
    *_times(),
    UniqueConstraint("organization_id", "name", name="uq_tools_org_name"),
)

agent_tools = Table(
    "agent_tools",
    metadata,
    Column("agent_id", String(64), ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True),
    Column("tool_id", String(64), ForeignKey("tools.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, nullable=False),
    Index("ix_agent_tools_tool_id", "tool_id"),
)

messages = Table(
    "messages",
    metadata,
    _id("message-... (time-ordered)"),
    _org(),
    Column("agent_id", String(64), ForeignKey("agents.id", ondelete="CASCADE"), nullable=False),
    Column("role", String(16), nullable=False),
    Column("text", CleanText, nullable=False),
    Column("search_text", CleanText, nullable=False, comment="what full-text search indexes"),
    Column("reasoning", CleanText),
    Column("tool_calls", JSONType, nullable=False),
    Column("tool_call_id", CleanString(255)),
    Column("name", CleanString(255)),
    Column("is_error", Boolean, nullable=False),
    Column("batch_item_id", String(64), ForeignKey("batch_items.id", ondelete="SET NULL")),
    Column("extra", JSONType, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("run_id", String(64), comment="the agent run (run-...) that wrote it, if any"),
    Column("step_id", String(64), comment="the step of that run"),
    Index("ix_messages_agent_id_id", "agent_id", "id"),
    Index("ix_messages_batch_item_id", "batch_item_id"),
    Index("ix_messages_run_id", "run_id"),
)

passages = Table(
    "passages",
    metadata,
    _id("passage-..."),
    _org(),
    Column("agent_id", String(64), ForeignKey("agents.id", ondelete="CASCADE"), nullable=False),
    Column("text", CleanText, nullable=False),
    Column("tags", JSONType, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Index("ix_passages_agent_id", "agent_id"),
)

deleted_agents = Table(
    "deleted_agents",
    metadata,
    # An agent's batch items outlive it (a run's record is what happened): its name is kept here
    # for the views of its runs, which mark it deleted.
    Column("id", String(64), primary_key=True, comment="the deleted agent's id"),
    _org(),
    Column("name", String(255), nullable=False),
    Column("deleted_at", UTCDateTime(), nullable=False),
)

agent_runs = Table(
    "agent_runs",
    metadata,
    _id("run-... (time-ordered)"),
    _org(),
    Column("agent_id", String(64), ForeignKey("agents.id", ondelete="CASCADE"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("background", Boolean, nullable=False),
    Column("request_config", JSONType, nullable=False),
    Column("metadata", JSONType, nullable=False),
    Column("stop_reason", String(32)),
    Column("error", CleanText),
    Column("steps", JSONType, nullable=False, comment="one entry per model call: id, model, tokens"),
    Column("callback_url", Text),
    Column("callback_sent_at", UTCDateTime()),
    Column("callback_status_code", Integer),
    Column("callback_error", CleanText),
    Column("completed_at", UTCDateTime()),
    # A background run's process renews this while it steps the run: a run still open past it
    # lost its process and is failed by whoever sees it (a reader of its stream, a starting server).
    Column("lease_until", UTCDateTime()),
    *_times(),
    Index("ix_agent_runs_org_id", "organization_id", "id"),
    Index("ix_agent_runs_agent_id", "agent_id"),
    Index("ix_agent_runs_status", "status"),
)

agent_run_chunks = Table(
    "agent_run_chunks",
    metadata,
    # A background run's stream, chunk by chunk, for clients that read it again (domain.run_chunks).
    Column("run_id", String(64), ForeignKey("agent_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("seq_id", Integer, primary_key=True, comment="the chunk's number in its stream, from 1"),
    Column("kind", String(8), nullable=False, comment="data, error or done"),
    Column("data", NullableJSONType, comment="the chunk's JSON object; NULL for done"),
)

batch_runs = Table(
    "batch_runs",
    metadata,
    _id("batch-..."),
    _org(),
    Column("status", String(16), nullable=False),
    Column("metadata", JSONType, nullable=False),
    Column("max_steps", Integer, nullable=False),
    Column("callback_url", Text),
    Column("callback_sent_at", UTCDateTime()),
    Column("callback_status_code", Integer),
    Column("callback_error", CleanText),
    Column("callback_attempts", Integer, nullable=False),
    Column("callback_next_at", UTCDateTime()),
    Column("completed_at", UTCDateTime()),
    Column("idempotency_key", String(255)),
    Column("request_hash", String(64), comment="sha256 of the creating request"),
    Column("deadline_at", UTCDateTime(), comment="when the run is to be done by; null: no deadline"),
    *_times(),
    Column(
        "kind",
        String(16),
        nullable=False,
        server_default=text("'main'"),
        comment="main: the user's agents; sleeptime: sleep-time agents gathered by the poller",
    ),
    Column(
        "queued_agents",
        Integer,
        nullable=False,
        server_default=text("0"),
        comment="agents in the run's requests while it waits for its first step (what its progress counts then)",
    ),
    Column("error", CleanText, comment="why the run failed before its first step; null: it did not"),
    Index("ix_batch_runs_org_status", "organization_id", "status"),
    Index("ix_batch_runs_org_id", "organization_id", "id"),  # a page of runs, ordered by id
    UniqueConstraint("organization_id", "idempotency_key", name="uq_batch_runs_organization_id_idempotency_key"),
)

batch_run_requests = Table(
    "batch_run_requests",
    metadata,
    # A run's requests until a poller writes its first step from them (and deletes them in the
    # same transaction): a run is queued while it has any, and its agents are reserved by them.
    Column("batch_run_id", String(64), ForeignKey("batch_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True, comment="the request's place in the run's body"),
    # No foreign key: an agent deleted while its run is queued is left out of its first step.
    Column("agent_id", String(64), nullable=False),
    Column("messages", JSONType, nullable=False, comment="the user's messages: texts, or text and images"),
    Column("max_steps", Integer),
    Column("client_tools", JSONType, comment="the tools the client runs itself, offered for the run"),
    Column(
        "answered",
        Boolean,
        nullable=False,
        server_default=false(),
        comment="the request answered the agent's approval request: its first step starts with a heartbeat",
    ),
    Index("ix_batch_run_requests_agent_id", "agent_id"),
)

provider_batches = Table(
    "provider_batches",
    metadata,
    _id("llm_batch-..."),
    _org(),
    Column("batch_run_id", String(64), ForeignKey("batch_runs.id", ondelete="CASCADE"), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("provider_batch_id", String(255), comment="the provider's own id, once submitted"),
    Column("step_number", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("provider_status", String(32)),
    Column("request_counts", JSONType, nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", UTCDateTime()),
    Column("next_poll_at", UTCDateTime()),
    Column("polled_at", UTCDateTime()),
    Column("ended_at", UTCDateTime()),
    Column("error", CleanText),
    Column("endpoint", String(255), comment="the provider's base URL it goes to"),
    Column(
        "submit_started_at",
        UTCDateTime(),
        comment="set before each call that submits it: the provider may have it from then on",
    ),
    Column("submit_attempts", Integer, nullable=False, server_default="0"),
    Column(
        "failures", Integer, nullable=False, server_default="0", comment="consecutive failures of its current stage"
    ),
    Column(
        "duplicates",
        JSONType,
        nullable=False,
        server_default=text("'[]'"),
        comment="provider ids of the same batch submitted twice, cancelled",
    ),
    Column(
        "summary",
        JSONType,
        comment="versioned JSON: its items counted and summed, once they are final (applied or cancelled)",
    ),
    *_times(),
    Column("deadline_at", UTCDateTime(), comment="its run's deadline, copied when the step was written"),
    Column("tail_at", UTCDateTime(), comment="when only a tail of its requests was left, seen or expected"),
    Column("takeover_at", UTCDateTime(), comment="when its open requests were taken over for the deadline"),
    Column(
        "taken_over",
        Integer,
        nullable=False,
        server_default="0",
        comment="its requests sent through the normal API instead",
    ),
    Column("model", String(255), comment="its requests' one model; null: several"),
    Column(
        "woken_at",
        UTCDateTime(),
        comment="when another process made it due at once (a webhook, a cancel): a lease given back keeps it so",
    ),
    UniqueConstraint("provider", "provider_batch_id", name="uq_provider_batches_provider_provider_batch_id"),
    Index("ix_provider_batches_status_next_poll_at", "status", "next_poll_at"),
    Index("ix_provider_batches_batch_run_id", "batch_run_id"),
)

batch_items = Table(
    "batch_items",
    metadata,
    _id("batch_item-..."),
    _org(),
    Column("batch_run_id", String(64), ForeignKey("batch_runs.id", ondelete="CASCADE"), nullable=False),
    Column(
        "provider_batch_id",
        String(64),
        ForeignKey("provider_batches.id", ondelete="CASCADE"),
        nullable=False,
    ),
    # No foreign key: an item stays when its agent is deleted (see ``deleted_agents``).
    Column("agent_id", String(64), nullable=False),
    Column("request_status", String(16), nullable=False),
    Column("step_status", String(16), nullable=False),
    Column("step_state", JSONType, nullable=False, comment="versioned JSON: step number, solver history"),
    Column("outcome", String(16), comment="what the step did to the agent: continued, finished, failed, ..."),
    Column("result", JSONType),
    Column("usage", NullableJSONType),  # NULL until the provider's result is stored
    Column("cost_usd", Float),
    Column("cost_without_batch_usd", Float, comment="the same tokens through the normal API"),
    Column("cache_savings_usd", Float, comment="the cached tokens as plain input, minus what they cost"),
    Column("error", CleanText),
    *_times(),
    Column("takeover_usd", Float, comment="taken over: its cost above the batch price"),
    # A provider batch's items counted by state from the index alone (the view of a run counts
    # the items of its open batches at each look), and those with usage summed without reading
    # the others: a batch waiting for its results has none.
    Index("ix_batch_items_provider_batch_id_state", "provider_batch_id", "step_status", "outcome"),
    Index(
        "ix_batch_items_provider_batch_id_used",
        "provider_batch_id",
        sqlite_where=text("usage IS NOT NULL"),
        postgresql_where=text("usage IS NOT NULL"),
    ),
    Index("ix_batch_items_agent_id_step_status", "agent_id", "step_status"),
    # A run's items by agent (its failed agents' later items, its agents page), id included so
    # that the agent's last item in the run is read from the index alone.
    Index("ix_batch_items_batch_run_id_agent_id", "batch_run_id", "agent_id", "id"),
    # A run's failed items, few: the run's failures are read without reading its other items.
    Index(
        "ix_batch_items_failed",
        "batch_run_id",
        sqlite_where=text("outcome = 'failed'"),
        postgresql_where=text("outcome = 'failed'"),
    ),
)

groups = Table(
    "groups",
    metadata,
    # Letta's multi-agent groups; nightshift runs the sleep-time kind (a main agent, the agent
    # whose ``managed_group_id`` names the group, and its sleep-time agents in ``group_agents``).
    _id("group-..."),
    _org(),
    Column("manager_type", String(32), nullable=False),
    Column("description", CleanText, nullable=False),
    Column("sleeptime_agent_frequency", Integer, comment="every how many turns of the main agent; null: every turn"),
    Column("turns_counter", Integer, nullable=False, comment="the main agent's turns counted so far"),
    Column("last_processed_message_id", String(64), comment="the main agent's last message its sleep-time agents read"),
    Column(
        "due_since",
        UTCDateTime(),
        comment="set when its sleep-time agents are due (in the main turn's transaction), cleared when gathered",
    ),
    Column("shared_block_ids", JSONType, nullable=False),
    Column("hidden", Boolean),
    *_times(),
    Index("ix_groups_org_id", "organization_id", "id"),
    Index(
        "ix_groups_due_since",
        "due_since",
        sqlite_where=text("due_since IS NOT NULL"),
        postgresql_where=text("due_since IS NOT NULL"),
    ),
)

group_agents = Table(
    "group_agents",
    metadata,
    Column("group_id", String(64), ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True),
    Column("agent_id", String(64), ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, nullable=False),
    Index("ix_group_agents_agent_id", "agent_id"),
)
