"""Settings, read from the environment (prefix ``NIGHTSHIFT_``) and built once by the caller."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from nightshift.domain.caching import CachePolicy
from nightshift.domain.limits import (
    DEFAULT_MAX_REQUEST_MB,
    DEFAULT_MAX_REQUEST_VALUES,
    DEFAULT_TOOL_READ_SECONDS,
    MAX_STEPS,
)

# Database connections a process keeps at most (NIGHTSHIFT_DATABASE_POOL_SIZE).
DEFAULT_POOL_SIZE = 20
# The host uids tool sandboxes run as when the server runs as root (NIGHTSHIFT_TOOL_UID_BASE and
# NIGHTSHIFT_TOOL_UID_COUNT): above the ranges that systemd gives to users, dynamic users and
# containers, below 2^31 (where some programs read uids as negative numbers).
DEFAULT_TOOL_UID_BASE = 1_879_048_192
DEFAULT_TOOL_UID_COUNT = 65_536
_LAST_UID = 2**31 - 1
# Callers of one organization that may wait for a tool sandbox worker at once (NIGHTSHIFT_TOOL_QUEUE_LIMIT).
DEFAULT_TOOL_QUEUE_LIMIT = 100


class SandboxKind(StrEnum):
    """How custom tools are isolated (``NIGHTSHIFT_TOOL_SANDBOX``)."""

    BUBBLEWRAP = "bubblewrap"  # Linux namespaces through bubblewrap: the default
    PROCESS = "process"  # a plain child process: no isolation, for machines without bubblewrap


class ToolNetwork(StrEnum):
    """What network tools get (``NIGHTSHIFT_TOOL_NETWORK``)."""

    NONE = "none"  # a network namespace of their own, with only loopback
    OUTBOUND = "outbound"  # the host's network: the internet, and every service the host can reach


class LogFormat(StrEnum):
    """How log lines are written (``NIGHTSHIFT_LOG_FORMAT``)."""

    TEXT = "text"  # one human-readable line per record: time, level, logger, message
    JSON = "json"  # one JSON object per line: time, level, logger, message and the record's fields


class LogLevel(StrEnum):
    """The lowest level of the records written (``NIGHTSHIFT_LOG_LEVEL``)."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


class Settings(BaseSettings):
    """Everything nightshift reads from its environment.

    Provider keys are not here: the official SDKs read ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``
    and their base URLs themselves.
    """

    model_config = SettingsConfigDict(env_prefix="NIGHTSHIFT_", extra="ignore")

    home: Path = Field(default_factory=lambda: Path.home() / ".nightshift")
    database_url: str | None = None
    # The most database connections each process keeps (serve is two: the API and its poller); a
    # request that finds them all in use waits for one (see store/db.py).
    database_pool_size: int = Field(default=DEFAULT_POOL_SIZE, ge=1)
    server_password: SecretStr | None = None
    host: str = "127.0.0.1"
    port: int = 8283
    # serve's connections (see serving.py): the time a request's head (request line and headers)
    # may take to arrive, a new connection's first included; how long a connection may stay idle
    # after a response; and how many connections (or requests in progress) at once, past which a
    # request is answered 503.
    head_timeout_seconds: float = Field(default=10.0, gt=0)
    keep_alive_seconds: int = Field(default=5, ge=1)
    max_connections: int = Field(default=500, ge=1)
    # How long a request's body may take to arrive whole, from its first byte read (a 408 past it);
    # the default leaves a batch run's largest body a slow link.
    body_timeout_seconds: float = Field(default=300.0, gt=0)
    # The longest and the shortest gap between two polls of one running provider batch: it is
    # polled often while young and across the span in which its provider's batches usually end,
    # never more often than the shortest gap (the providers' rate limits) allows
    # (``domain/polling.py``). The poller's passes are never further apart than the longest.
    poll_interval_seconds: float = 30.0
    poll_min_seconds: float = Field(default=5.0, gt=0)
    # Where the prompt-cache breakpoints of Anthropic requests go and for how long they are written:
    # auto chooses per request what makes the agent's task cheapest (``domain/caching.py``); 1h,
    # 5m write every breakpoint for that long; off writes none.
    cache_policy: CachePolicy = CachePolicy.AUTO
    poller: bool = True
    # serve: run the poller in a child process (``nightshift poll``), so that the API process's
    # event loop serves requests only; false: inside the API process, on its event loop.
    poller_process: bool = True
    # On SQLite, how often a poller asks whether anything was committed, to look for a newly queued
    # run, when nothing tells it sooner (on Linux it asks at each write to the database's files;
    # on PostgreSQL, NOTIFY tells it).
    run_queue_seconds: float = Field(default=1.0, gt=0)
    # How long a provider batch a process works on stays its own (renewed while it works): after a
    # crash, how soon another process takes over. Default: 20 poll intervals, at least 5 s.
    lease_seconds: float | None = Field(default=None, gt=0)
    # On SIGTERM, how long in-flight requests, then the batch stage in progress, may take to finish
    # before this process gives its leases back anyway (a half-done stage is safe to redo).
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    default_max_steps: int = Field(default=10, ge=1, le=MAX_STEPS)
    # A stream with include_pings gets a ping after this long without a chunk (Letta's keep-alive).
    stream_ping_seconds: float = Field(default=30.0, gt=0)
    callback_retry_seconds: float = Field(default=2.0, gt=0)  # first retry; doubles each time
    callback_allow_private: bool = False  # callbacks may go to loopback and private addresses
    # Sleep-time agents due after their main agents' turns are gathered into one batch run once the
    # oldest has waited this long, or at once when this many are due (see batch/sleeptime.py).
    sleeptime_interval_seconds: float = Field(default=300.0, ge=0)
    sleeptime_enough: int = Field(default=1000, ge=1)
    # First wait before a failed batch stage (provider unreachable, say) is tried again; doubles.
    error_backoff_seconds: float = Field(default=30.0, gt=0)
    # The largest request body, checked before it is parsed (batch runs take more: see api/app.py).
    max_request_mb: int = Field(default=DEFAULT_MAX_REQUEST_MB, ge=1, le=1024 * 1024)
    # The most JSON values (strings, numbers, keys, arrays, objects) of a request body, counted
    # before it is decoded: decoding holds the event loop, longer the more values (see api/body_limit.py).
    max_request_values: int = Field(default=DEFAULT_MAX_REQUEST_VALUES, ge=1000)
    # Custom tools: how they are isolated, what they may reach, and what one call may use.
    tool_sandbox: SandboxKind = SandboxKind.BUBBLEWRAP
    tool_bwrap: str = "bwrap"
    tool_network: ToolNetwork = ToolNetwork.NONE
    tool_timeout_seconds: float = Field(default=10.0, gt=0)
    tool_memory_limit_mb: int = Field(default=512, ge=16)
    tool_max_processes: int = Field(default=32, ge=1)
    tool_max_open_files: int = Field(default=256, ge=16)
    tool_max_file_mb: int = Field(default=64, ge=1)
    tool_workers: int = Field(default=2, ge=1)
    # When the server runs as root, each tool sandbox runs as a host uid of its own from this range
    # (as another user, every sandbox runs as that user): no uid of the host's users may be in it.
    tool_uid_base: int = Field(default=DEFAULT_TOOL_UID_BASE, ge=1000, le=_LAST_UID)
    tool_uid_count: int = Field(default=DEFAULT_TOOL_UID_COUNT, ge=1, le=_LAST_UID)
    # How many callers of one organization may wait for a sandbox worker at once (a tool run, a
    # synchronous message's tool calls, a batch step's calls of the organization: one each); the
    # next one's calls fail at once, saying the sandbox is busy.
    tool_queue_limit: int = Field(default=DEFAULT_TOOL_QUEUE_LIMIT, ge=1)
    # How long reading a custom tool's source and schemas (in a child process) may take: past it,
    # the request is a 422 (see tools/reading.py).
    tool_read_seconds: float = Field(default=DEFAULT_TOOL_READ_SECONDS, gt=0)
    sql_echo: bool = False
    log_format: LogFormat = LogFormat.TEXT
    log_level: LogLevel = LogLevel.INFO
    # Overrides of the price table (genai-prices' data), e.g. {"anthropic/claude-3-5-haiku*":
    # {"input": 0.8, "output": 4, "cache_write": 1, "cache_read": 0.08, "cache_write_1h": 1.6}} (USD per
    # million tokens, normal-API prices; cache_write is the 5-minute write, cache_write_1h defaults to it).
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Models an agent may name although the price data does not know them (a model newer than the
    # data), comma-separated provider/model-name; "provider/prefix*" allows every name it starts.
    # Their cost counts as 0 (unknown) unless NIGHTSHIFT_PRICES gives their prices.
    extra_models: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # The model that writes the summaries of agents' evicted messages, as provider/model-name
    # (default: each agent's own model).
    summary_model: str | None = None
    # The most bytes of requests in one provider batch: a step's agents on a provider go into as
    # many batches as this (and 10,000 requests a batch) requires, on their estimated size, and a
    # batch is cut again on its real size when it is sent. Default and ceiling: the provider's own
    # limit (see domain/batch_split.py and batch/submission.py).
    batch_bytes: int | None = Field(default=None, ge=1)
    # What a poller keeps of the messages it read for its requests, for the next steps' (see
    # store/message_cache.py), in MiB of their estimated size; 0: nothing kept.
    message_cache_mb: int = Field(default=64, ge=0)
    # What a poller keeps of the agents it submitted, as stored, for their next steps (see
    # store/agent_cache.py), in MiB of their estimated size; 0: nothing kept.
    agent_cache_mb: int = Field(default=128, ge=0)

    @field_validator("home")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @model_validator(mode="after")
    def _uids_fit(self) -> Settings:
        if self.tool_uid_base + self.tool_uid_count - 1 > _LAST_UID:
            raise ValueError(
                f"NIGHTSHIFT_TOOL_UID_BASE + NIGHTSHIFT_TOOL_UID_COUNT must stay within {_LAST_UID + 1} "
                f"(uids at or above 2^31 are read as negative by some programs)"
            )
        return self

    @field_validator("extra_models", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @property
    def resolved_database_url(self) -> str:
        """The database URL with an async driver, defaulting to a SQLite file under ``home``."""
        return async_database_url(self.database_url or f"sqlite:///{self.home / 'nightshift.db'}")


def async_database_url(url: str) -> str:
    """Map the plain URL forms a user writes to SQLAlchemy's async drivers.

    ``sqlite:///path`` becomes ``sqlite+aiosqlite:///path`` and ``postgresql://...`` (or
    ``postgres://...``) becomes ``postgresql+asyncpg://...``. URLs that already name a driver are
    kept as they are.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a database URL: {url!r} (expected sqlite:///path or postgresql://...)")
    if "+" in scheme:
        return url
    if scheme == "sqlite":
        return f"sqlite+aiosqlite://{rest}"
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+asyncpg://{rest}"
    raise ValueError(f"unsupported database {scheme!r}: use sqlite:///path or postgresql://user@host/db")
