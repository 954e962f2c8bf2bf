"""nightshift's Python client: batch runs, Letta's runs and API keys, over HTTP.

``Client`` (sync) and ``AsyncClient`` (async) have the same resources: ``batches`` (create,
create_from_file, retrieve, list, cancel, agents, messages, wait, results), ``runs`` (list,
retrieve, messages, steps, usage) and ``keys`` (create, list, revoke). Listings are iterators that
fetch page after page. Errors are ``NightshiftClientError`` and its subclasses (``errors``).

Agents, tools, blocks and sending messages to one agent (with approvals:
``agents.messages.create(approvals=...)``) are Letta's API, which letta-client covers; this
client covers what it does not, batch runs first. It imports only httpx, pydantic and the
standard library, so that importing it is quick.

    from nightshift.client import Client

    with Client() as client:  # NIGHTSHIFT_SERVER, NIGHTSHIFT_API_KEY
        run = client.batches.create([{"agent_id": agent_id, "input": "Hello"}], name="greetings")
        run = client.batches.wait(run.id, on_progress=lambda r: print(r.progress.agents))
        for result in client.batches.results(run.id):
            print(result.agent_name, result.state, result.final_message, result.cost_usd)
"""

from nightshift.client._async import AsyncBatches, AsyncClient, AsyncKeys, AsyncRuns, AsyncSleeptime
from nightshift.client._http import DEFAULT_SERVER
from nightshift.client._sync import Batches, Client, Keys, Runs, Sleeptime
from nightshift.client.errors import (
    APIError,
    AuthenticationError,
    BadRequest,
    Conflict,
    ConnectionFailed,
    InvalidRequestsFile,
    NightshiftClientError,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServerError,
    Timeout,
    UnprocessableEntity,
)
from nightshift.client.types import (
    AgentCounts,
    AgentResult,
    AgentRun,
    ApiKey,
    ApiKeyCreated,
    BatchRequest,
    BatchRun,
    BatchRunAgent,
    BatchRunAgentRequest,
    BatchRunCosts,
    BatchRunProgress,
    BatchTurnarounds,
    KindCosts,
    MessagePart,
    ModelTurnaround,
    ProviderBatch,
    ProviderProblem,
    ProviderTurnaround,
    RunFailure,
    RunMessage,
    RunStep,
    RunUsage,
    TokenUsage,
    ToolCall,
)

__all__ = [
    "DEFAULT_SERVER",
    "APIError",
    "AgentCounts",
    "AgentResult",
    "AgentRun",
    "ApiKey",
    "ApiKeyCreated",
    "AsyncBatches",
    "AsyncClient",
    "AsyncKeys",
    "AsyncRuns",
    "AsyncSleeptime",
    "AuthenticationError",
    "BadRequest",
    "BatchRequest",
    "BatchRun",
    "BatchRunAgent",
    "BatchRunAgentRequest",
    "BatchRunCosts",
    "BatchRunProgress",
    "BatchTurnarounds",
    "Batches",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "InvalidRequestsFile",
    "Keys",
    "KindCosts",
    "MessagePart",
    "ModelTurnaround",
    "NightshiftClientError",
    "NotFound",
    "PermissionDenied",
    "ProviderBatch",
    "ProviderProblem",
    "ProviderTurnaround",
    "RateLimited",
    "RunFailure",
    "RunMessage",
    "RunStep",
    "RunUsage",
    "Runs",
    "ServerError",
    "Sleeptime",
    "Timeout",
    "TokenUsage",
    "ToolCall",
    "UnprocessableEntity",
]
